"""Entropic optimal-transport solvers: the ground floor under the OT objectives (m-LTM inverse OT, DART UWD).

Laid out like POT, a module per problem family, pure functions over torch tensors, device-agnostic (CPU or
CUDA) and float32-safe; this package imports nothing else of hf-atr:

- :func:`sinkhorn_log_plan` (:mod:`~hf_atr.ot.balanced`): balanced entropic OT (m-LTM Eq. 6-7, DART
  Eq. 4), returns the log plan.
- :func:`unbalanced_sinkhorn_plan` (:mod:`~hf_atr.ot.unbalanced`): entropic OT with KL-relaxed marginals
  (DART Eq. 8-9), returns the plan.
- :func:`partial_sinkhorn_log_plan` (:mod:`~hf_atr.ot.partial`): entropic partial OT of total mass
  ``mass`` (m-LTM Eq. 12-13, Bregman projections of Benamou et al. 2015), returns the log plan.

POT is the reference implementation in the tests: ``ot.sinkhorn(..., method="sinkhorn_log")``,
``ot.unbalanced.sinkhorn_unbalanced(..., reg_type="kl")`` and ``ot.partial.entropic_partial_wasserstein``
solve the same problems and reach the same plans. Defaults, argument checks and the stabilised kernel
that the families share live in :mod:`~hf_atr.ot.utils`.

How the solvers work. A plan is ``exp(-cost / reg + alpha_i + beta_j (+ eta))`` for dual potentials kept in
the log domain, so the log plan is exact even where the plan itself underflows (at ``reg = 0.005`` the
diagonal of a retrieval plan is ``exp(-135)``, below float32's range). The iterations themselves run on a
*stabilised kernel* ``exp(log_kernel + alpha_i + beta_j)`` (Schmitzer 2019): the current plan, which carries
every row's and column's mass, multiplied by scaling vectors with matrix-vector products, ten times cheaper
than a log-sum-exp pass. Whenever a scaling drifts beyond ``exp(±ABSORB_LOG_SCALING)`` it is absorbed
into the potentials, an exact log-domain iteration is taken and the kernel is rebuilt, so no scaling can
overflow and no row of the kernel is ever empty. Sinkhorn converges linearly, and on near-diagonal
retrieval costs slowly (thousands of iterations, in POT as well); when the balanced solve (``m <= 2048``
columns) has not reached ``tol`` after ``2 m`` iterations it is finished by Newton's method on the
semi-dual in float64 (3-5 steps of ``O(n m^2 + m^3)``; Sinkhorn resumes if Newton stalls).

Gradients (``grad_mode``):

- ``"one_step"`` (balanced default): solve without autograd, then take one differentiable log-domain
  iteration from the converged potentials. Memory does not grow with the iteration count. For the
  balanced IOT loss with uniform marginals it matches the exact implicit gradient closely (the loss is, up
  to the cost's diagonal, the dual objective, whose potential-derivative vanishes at the optimum); it is
  *not* accurate in general: for the partial IOT loss it is 50-70 % off.
- ``"implicit"`` (partial default): solve without autograd, then back-propagate the exact implicit
  gradient of the fixed point (adjoint linear system solved by BiCGStab with vector-Jacobian products of
  one round). Memory of one round.
- ``"envelope"`` (unbalanced default): the plan is returned detached; the gradient of ``<P, C>`` through
  ``C`` equals the gradient of the full unbalanced objective by the envelope theorem.
- ``"autograd"``: back-propagation through every log-domain iteration (memory grows with the iterations;
  the reference for the other modes).
- ``"none"``: detached output.
"""

from .balanced import sinkhorn_log_plan
from .partial import partial_sinkhorn_log_plan
from .unbalanced import unbalanced_sinkhorn_plan
from .utils import DEFAULT_MAX_ITER, DEFAULT_TOL

__all__ = [
    "DEFAULT_MAX_ITER",
    "DEFAULT_TOL",
    "partial_sinkhorn_log_plan",
    "sinkhorn_log_plan",
    "unbalanced_sinkhorn_plan",
]

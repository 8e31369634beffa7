"""Our OT solvers (hf_atr.ot) against POT, side by side in one run, with the speed goal each must meet.

Run: ``python benchmarks/ot_solvers.py [--quick] [--threads 2]``. Float32 on CPU. Prints, for each goal,
both timings (median of repeats, interleaved), the ratio, the accuracy, and whether the goal is met:

1. Balanced IOT forward+backward on near-diagonal retrieval costs (1 - cos of near-aligned embeddings),
   reg = 0.05, n = 256 and 1024: ours (``grad_mode="one_step"``) vs POT ``ot.sinkhorn(...,
   method="sinkhorn_log")`` with autograd, both at stopThr/tol = 1e-6. Goal: >= 2x faster, gradient within
   1e-4 relative of the exact one; both run up to 10,000 iterations. Ours is also timed at tol 1e-7, and at
   the ``iot`` objective's defaults (tol 1e-7, max_iter 1000). The exact gradient is the closed form (I / k - P*) / reg of the IOT loss
   -(1/k) sum_i log(k P_ii) with uniform marginals, P* from a float64 solve at tol 1e-12.
2. Partial OT (mass 0.95, reg = 0.05, n = 256), forward+backward of the same loss: ours vs POT's default
   ``ot.partial.entropic_partial_wasserstein`` call (stopThr=1e-100: all 1000 iterations). Goal: >= 10x
   faster with the plan within 1e-5 (max abs). Ours uses its default exact implicit gradient; the cheaper
   one-step gradient is timed too, with its (large) gradient error.
3. Unbalanced UWD term at DART's shape (batch k = 32, d = 512 feature channels, cost C[i, j] =
   ||U[:, i] - V[:, j]||, reg = 0.03, tau = 0.05): cost + solve + envelope backward of <P, C>, ours vs POT's
   no-grad ``sinkhorn_unbalanced(..., method="sinkhorn_translation_invariant")`` + the same backward.
   Goal: ours <= 1.5x POT's time.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

import ot
import torch

from hf_atr.objectives.mltm import DEFAULT_IOT_TOL
from hf_atr.ot import DEFAULT_MAX_ITER, partial_sinkhorn_log_plan, sinkhorn_log_plan, unbalanced_sinkhorn_plan

REG_IOT = 0.05
TOL = 1e-6


def retrieval_cost(n: int, seed: int = 0) -> torch.Tensor:
    """(n, n) float32 cost 1 - cos(audio_i, text_j) of near-aligned, clustered embeddings (near-diagonal plan)."""
    generator = torch.Generator().manual_seed(seed)
    audio = 1.5 * torch.randn(n, 64, generator=generator) + torch.randn(1, 64, generator=generator)
    audio = torch.nn.functional.normalize(audio, dim=1)
    text = torch.nn.functional.normalize(audio + 0.06 * torch.randn(n, 64, generator=generator), dim=1)
    return 1 - audio @ text.T


def iot_loss_from_log_plan(log_plan: torch.Tensor) -> torch.Tensor:
    k = log_plan.shape[0]
    return -(log_plan.diagonal() + torch.log(torch.tensor(float(k)))).mean()


def iot_loss_from_plan(plan: torch.Tensor) -> torch.Tensor:
    return iot_loss_from_log_plan(plan.diagonal().log().diag_embed())


def timed(function: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median wall time (s) over `repeats` calls and the last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def side_by_side(ours: Callable[[], object], pot: Callable[[], object], repeats: int):
    """Interleaved timings (so load on the shared machine hits both alike): medians and last results."""
    ours_times, pot_times = [], []
    ours_result = pot_result = None
    for _ in range(repeats):
        seconds, ours_result = timed(ours, 1)
        ours_times.append(seconds)
        seconds, pot_result = timed(pot, 1)
        pot_times.append(seconds)
    return statistics.median(ours_times), statistics.median(pot_times), ours_result, pot_result


def verdict(met: bool) -> str:
    return "MET" if met else "NOT MET"


def balanced_iot(n: int, repeats: int) -> None:
    cost = retrieval_cost(n)
    uniform = torch.full((n,), 1.0 / n)
    exact_plan = sinkhorn_log_plan(
        cost.double(), REG_IOT, tol=1e-12, max_iter=100_000, grad_mode="none"
    ).exp()
    exact_gradient = (torch.eye(n, dtype=torch.float64) / n - exact_plan) / REG_IOT

    def ours(tol: float = TOL, max_iter: int = 10_000) -> torch.Tensor:
        leaf = cost.clone().requires_grad_()
        iot_loss_from_log_plan(sinkhorn_log_plan(leaf, REG_IOT, tol=tol, max_iter=max_iter)).backward()
        return leaf.grad

    def pot() -> torch.Tensor:
        leaf = cost.clone().requires_grad_()
        plan = ot.sinkhorn(
            uniform, uniform, leaf, REG_IOT, method="sinkhorn_log", stopThr=TOL, numItermax=10_000
        )
        iot_loss_from_plan(plan).backward()
        return leaf.grad

    _, log = ot.sinkhorn(
        uniform, uniform, cost, REG_IOT, method="sinkhorn_log", stopThr=TOL, numItermax=10_000, log=True
    )
    ours(), ours(TOL / 10)  # warm-up
    ours_s, pot_s, ours_grad, pot_grad = side_by_side(ours, pot, repeats)
    tight_s, tight_grad = timed(lambda: ours(TOL / 10), max(3, repeats))
    defaults_s, defaults_grad = timed(
        lambda: ours(DEFAULT_IOT_TOL, max_iter=DEFAULT_MAX_ITER), max(3, repeats)
    )

    def relative_error(gradient: torch.Tensor) -> float:
        return float((gradient.double() - exact_gradient).norm() / exact_gradient.norm())

    speedup = pot_s / ours_s
    ours_error, pot_error = relative_error(ours_grad), relative_error(pot_grad)
    tight_error = relative_error(tight_grad)
    print(
        f"[balanced IOT n={n}] POT iterations {log['niter']}; fwd+bwd at tol {TOL:g}: ours (one_step) "
        f"{ours_s * 1e3:.1f} ms, POT sinkhorn_log+autograd {pot_s * 1e3:.1f} ms -> {speedup:.1f}x faster (goal "
        f">= 2x: {verdict(speedup >= 2)}); gradient rel. error vs exact: ours {ours_error:.1e}, POT "
        f"{pot_error:.1e} (goal <= 1e-4: {verdict(ours_error <= 1e-4)})\n"
        f"    ours at tol {TOL / 10:g}: {tight_s * 1e3:.1f} ms ({pot_s / tight_s:.1f}x faster than POT at {TOL:g}), "
        f"gradient rel. error {tight_error:.1e} (goal <= 1e-4: {verdict(tight_error <= 1e-4)})\n"
        f"    ours at the iot defaults (tol {DEFAULT_IOT_TOL:g}, max_iter {DEFAULT_MAX_ITER}): {defaults_s * 1e3:.1f} ms "
        f"({pot_s / defaults_s:.1f}x faster than POT at {TOL:g}), gradient rel. error "
        f"{relative_error(defaults_grad):.1e} (goal <= 1e-4: {verdict(relative_error(defaults_grad) <= 1e-4)})"
    )


def partial_ot(n: int, repeats: int) -> None:
    cost = retrieval_cost(n, seed=1)
    uniform = torch.full((n,), 1.0 / n)
    mass = 0.95
    exact_leaf = cost.double().requires_grad_()
    iot_loss_from_log_plan(
        partial_sinkhorn_log_plan(exact_leaf, REG_IOT, mass, tol=1e-9, max_iter=100_000)
    ).backward()
    exact_gradient = exact_leaf.grad

    def ours(grad_mode: str = "implicit") -> tuple[torch.Tensor, torch.Tensor]:
        leaf = cost.clone().requires_grad_()
        log_plan = partial_sinkhorn_log_plan(
            leaf, REG_IOT, mass, tol=TOL, max_iter=10_000, grad_mode=grad_mode
        )
        iot_loss_from_log_plan(log_plan).backward()
        return log_plan.detach().exp(), leaf.grad

    def pot() -> tuple[torch.Tensor, torch.Tensor]:
        leaf = cost.clone().requires_grad_()
        plan = ot.partial.entropic_partial_wasserstein(uniform, uniform, leaf, REG_IOT, m=torch.tensor(mass))
        iot_loss_from_plan(plan).backward()
        return plan.detach(), leaf.grad

    ours()  # warm-up
    ours_s, pot_s, (ours_plan, ours_grad), (pot_plan, pot_grad) = side_by_side(ours, pot, repeats)
    one_step_s, (_, one_step_grad) = timed(lambda: ours("one_step"), max(3, repeats))
    plan_difference = float((ours_plan - pot_plan).abs().max())
    speedup = pot_s / ours_s

    def relative_error(gradient: torch.Tensor) -> float:
        return float((gradient.double() - exact_gradient).norm() / exact_gradient.norm())

    print(
        f"[partial OT n={n}, mass {mass}] fwd+bwd ours (implicit gradient, tol {TOL:g}) {ours_s * 1e3:.1f} ms, "
        f"POT default call (1000 iterations) + autograd {pot_s * 1e3:.1f} ms -> {speedup:.1f}x faster (goal "
        f">= 10x: {verdict(speedup >= 10)}); max |plan difference| {plan_difference:.1e} (goal <= 1e-5: "
        f"{verdict(plan_difference <= 1e-5)})\n"
        f"    gradient rel. error vs exact: ours implicit {relative_error(ours_grad):.1e}, POT "
        f"{relative_error(pot_grad):.1e}; ours one_step {one_step_s * 1e3:.1f} ms "
        f"({pot_s / one_step_s:.1f}x faster) but gradient rel. error {relative_error(one_step_grad):.1e}"
    )


def unbalanced_uwd(batch: int, channels: int, repeats: int) -> None:
    generator = torch.Generator().manual_seed(2)
    audio = torch.nn.functional.normalize(torch.randn(batch, channels, generator=generator), dim=1)
    text = torch.nn.functional.normalize(
        audio + 0.5 * torch.randn(batch, channels, generator=generator), dim=1
    )
    marginal = torch.rand(channels, generator=generator) + 0.5  # stands in for reliability-aware marginals
    marginal = marginal / marginal.sum()
    reg, reg_marginal = 0.03, 0.05

    def feature_cost() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        audio_leaf, text_leaf = audio.clone().requires_grad_(), text.clone().requires_grad_()
        return torch.cdist(audio_leaf.T, text_leaf.T), audio_leaf, text_leaf

    def ours() -> torch.Tensor:
        cost, audio_leaf, _ = feature_cost()
        plan = unbalanced_sinkhorn_plan(cost, reg, reg_marginal, marginal, marginal, tol=TOL)
        (plan * cost).sum().backward()
        return plan, audio_leaf.grad

    def pot() -> torch.Tensor:
        cost, audio_leaf, _ = feature_cost()
        with torch.no_grad():
            plan = ot.unbalanced.sinkhorn_unbalanced(
                marginal,
                marginal,
                cost,
                reg,
                reg_marginal,
                method="sinkhorn_translation_invariant",
                stopThr=TOL,
            )
        (plan * cost).sum().backward()
        return plan, audio_leaf.grad

    ours_s, pot_s, (ours_plan, ours_grad), (pot_plan, pot_grad) = side_by_side(ours, pot, repeats)
    ratio = ours_s / pot_s
    print(
        f"[unbalanced UWD k={batch}, d={channels}] cost+solve+envelope backward ours {ours_s * 1e3:.1f} ms, "
        f"POT translation-invariant (no grad) + envelope backward {pot_s * 1e3:.1f} ms -> ours/POT "
        f"{ratio:.2f}x (goal <= 1.5x: {verdict(ratio <= 1.5)}); max |plan difference| "
        f"{float((ours_plan - pot_plan).abs().max()):.1e} (plan max {float(pot_plan.max()):.1e}); gradient rel. "
        f"difference {float((ours_grad - pot_grad).norm() / pot_grad.norm()):.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, skip n = 1024")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--sizes", type=int, nargs="+", help="balanced IOT sizes (default 256 1024; 256 quick)"
    )
    parser.add_argument("--skip-partial-unbalanced", action="store_true", help="only the balanced comparison")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", module="ot")
    print(f"torch {torch.__version__}, POT {ot.__version__}, {args.threads} threads, float32, CPU")
    # POT with autograd takes seconds per call: few repeats of it, medians of interleaved runs.
    for n in args.sizes or ((256,) if args.quick else (256, 1024)):
        balanced_iot(n, 1 if args.quick or n > 256 else 3)
    if not args.skip_partial_unbalanced:
        partial_ot(256, 1 if args.quick else 2)
        unbalanced_uwd(32, 512, 5 if args.quick else 15)


if __name__ == "__main__":
    main()

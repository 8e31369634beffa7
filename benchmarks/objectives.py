"""Training objectives side by side: forward+backward time relative to contrastive, and the UWD term's memory.

Run: ``OMP_NUM_THREADS=1 python benchmarks/objectives.py [--quick] [--threads N]``. Float32 on CPU, embeddings
without a model (so ``iot``/``iot_partial``/``dart`` use the Euclidean ground metric and ``contrastive`` the
inner product with t = 0.07, as the objectives do when no model is passed). Every objective has its
registry defaults: ``iot`` ε = 0.05, ``iot_partial`` ε = 0.05 with mass 0.95 (exact implicit gradient),
``dart`` = ``iot`` at ε = 0.03 + 0.5 · UWD-R (ε = 0.03, τ = 0.05, reliability-aware marginals with EMA),
``triplet`` VSE++ hardest negatives with margin 0.2; all solvers stop at tolerance 1e-6.

For (batch, dim) in {(32, 512), (256, 1024)} (``--quick``: (32, 512) only, fewer repeats) and two kinds of
L2-normalised embeddings:

* random: audio and text drawn independently (no pairing structure: the plans are spread out);
* near-diagonal: text_i = normalise(audio_i + noise), noise of norm ≈ 1 (cosine of a true pair ≈ 0.7,
  others ≈ 0: the retrieval-like case where the IOT plan is close to the diagonal).

1. Time: wall-clock of forward + backward (``loss.backward()`` into leaf embeddings), measured in
   interleaved rounds (every objective once per round) after one warm-up call. Printed: the median and the
   minimum over the rounds in ms, and the minimum relative to ``contrastive``'s minimum in the same rounds
   (the minimum is the least disturbed by other processes on a shared machine; the median shows the
   spread). "uwd term" is DART's feature-level term alone.
2. Memory of the UWD term (``UnbalancedFeatureTransport``: RAM statistics + EMA, feature cost, detached
   unbalanced plan, ``<C, P>`` and its backward), measured with ``torch.profiler`` (``profile_memory=True``):
   every allocation and free of torch's CPU allocator is recorded with the allocator's running total, and
   the peak is the largest running total minus the total before the call (the input embeddings exist
   before and are not counted; the gradient buffers of the inputs are). This is the tracemalloc equivalent
   for torch CPU tensors: it counts tensor storage, not Python objects or allocator caching. Printed too:
   the bytes the term saves for backward (``saved_tensors_hooks``: what stays alive between forward and
   backward inside a larger graph), the peak of ``dart`` minus the peak of its base ``iot`` (the extra
   memory the UWD term costs inside the objective), and, at d = 512, the same term with autograd through
   the unrolled unbalanced iterations instead of the detached plan. Goal (DART App. C claims
   ≈ 2 MB at d = 512, k = 32 with a detached plan): peak ≤ 8 MiB at (32, 512).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile

from hf_atr.objectives.dart import (
    DEFAULT_UWD_MARGINAL_REG,
    DEFAULT_UWD_REG,
    UnbalancedFeatureTransport,
    feature_cost,
    normalised_marginal,
    reliability_scores,
)
from hf_atr.objectives.registry import Objective, build_objective
from hf_atr.ot import unbalanced_sinkhorn_plan

OBJECTIVES = ("contrastive", "triplet", "iot", "iot_partial", "dart")
CASES = ((32, 512), (256, 1024))
QUICK_CASES = ((32, 512),)
KINDS = ("random", "near-diagonal")
UWD_MEMORY_TARGET_MIB = 8.0
PAPER_UWD_MEMORY_MB = 2.0
MIB = 2**20

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def make_embeddings(batch: int, dim: int, kind: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """L2-normalised ``(batch, dim)`` audio and text embeddings, independent or near-paired (see module doc)."""
    generator = torch.Generator().manual_seed(seed)
    audio = torch.nn.functional.normalize(torch.randn(batch, dim, generator=generator), dim=1)
    noise = torch.randn(batch, dim, generator=generator)
    if kind == "random":
        text = torch.nn.functional.normalize(noise, dim=1)
    else:
        text = torch.nn.functional.normalize(audio + noise / dim**0.5, dim=1)
    return audio, text


def objective_loss(objective: Objective) -> LossFn:
    """The objective's scalar loss on ``(audio, text)``, all rows distinct clips, no model."""
    audio_ids = None

    def loss(audio: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        nonlocal audio_ids
        if audio_ids is None or len(audio_ids) != audio.shape[0]:
            audio_ids = [str(index) for index in range(audio.shape[0])]
        return objective(audio, text, batch={"audio_ids": audio_ids}).loss

    return loss


def forward_backward(loss_fn: LossFn, audio: torch.Tensor, text: torch.Tensor) -> None:
    """One forward + backward into fresh leaf copies of the embeddings."""
    audio_leaf = audio.clone().requires_grad_(True)
    text_leaf = text.clone().requires_grad_(True)
    loss_fn(audio_leaf, text_leaf).backward()


def time_side_by_side(
    loss_fns: dict[str, LossFn], audio: torch.Tensor, text: torch.Tensor, rounds: int
) -> dict[str, list[float]]:
    """Seconds of forward + backward of each loss in each round, every loss once per round (after a warm-up call each)."""
    for loss_fn in loss_fns.values():
        forward_backward(loss_fn, audio, text)
    samples: dict[str, list[float]] = {name: [] for name in loss_fns}
    for _ in range(rounds):
        for name, loss_fn in loss_fns.items():
            started = time.perf_counter()
            forward_backward(loss_fn, audio, text)
            samples[name].append(time.perf_counter() - started)
    return samples


def peak_allocated_bytes(run: Callable[[], None]) -> int:
    """Peak bytes of tensor storage allocated by ``run`` on torch's CPU allocator, above what was live before.

    From the allocator events of ``torch.profiler`` (``profile_memory=True``), each carrying the running
    total of allocated bytes.
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        run()
    allocations = []
    stack = list(profiler.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            allocations.append(
                (event.start_time_ns, event.extra_fields.alloc_size, event.extra_fields.total_allocated)
            )
        stack.extend(event.children)
    if not allocations:
        return 0
    allocations.sort()
    _, first_size, first_total = allocations[0]
    baseline = first_total - first_size
    return max(0, max(total for _, _, total in allocations) - baseline)


def saved_for_backward_bytes(loss_fn: LossFn, audio: torch.Tensor, text: torch.Tensor) -> int:
    """Bytes of the distinct tensor storages autograd keeps for the backward of ``loss_fn`` (inputs excluded)."""
    audio_leaf = audio.clone().requires_grad_(True)
    text_leaf = text.clone().requires_grad_(True)
    inputs = {audio_leaf.untyped_storage().data_ptr(), text_leaf.untyped_storage().data_ptr()}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in inputs:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = loss_fn(audio_leaf, text_leaf)
    loss.backward()
    return sum(storages.values())


def uwd_with_autograd_plan(audio: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
    """The UWD-R term with autograd through the unrolled unbalanced iterations (what the detached plan avoids)."""
    marginal = normalised_marginal(reliability_scores(audio.detach(), text.detach()))
    cost = feature_cost(audio, text)
    plan = unbalanced_sinkhorn_plan(
        cost, DEFAULT_UWD_REG, DEFAULT_UWD_MARGINAL_REG, marginal, marginal, grad_mode="autograd"
    )
    return (cost * plan).sum()


def memory_report(audio: torch.Tensor, text: torch.Tensor, with_autograd_plan: bool) -> dict[str, float]:
    """MiB: UWD term peak, its saved-for-backward bytes, dart − iot peaks, and optionally the autograd-plan peak."""
    uwd_term = UnbalancedFeatureTransport()
    uwd_loss: LossFn = lambda a, t: uwd_term(a, t).loss  # noqa: E731
    forward_backward(uwd_loss, audio, text)  # the EMA exists from the second step on, as in training
    dart_loss = objective_loss(build_objective({"name": "dart"}))
    iot_loss = objective_loss(build_objective({"name": "iot", "reg": DEFAULT_UWD_REG}))
    forward_backward(dart_loss, audio, text)
    report = {
        "uwd term peak": peak_allocated_bytes(lambda: forward_backward(uwd_loss, audio, text)) / MIB,
        "uwd saved for backward": saved_for_backward_bytes(uwd_loss, audio, text) / MIB,
        "dart peak - iot peak": (
            peak_allocated_bytes(lambda: forward_backward(dart_loss, audio, text))
            - peak_allocated_bytes(lambda: forward_backward(iot_loss, audio, text))
        )
        / MIB,
    }
    if with_autograd_plan:
        report["uwd term peak, autograd through the solver"] = (
            peak_allocated_bytes(lambda: forward_backward(uwd_with_autograd_plan, audio, text)) / MIB
        )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="(32, 512) only, fewer repeats")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--rounds", type=int, default=None, help="timing rounds (default 5, quick 3)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    rounds = args.rounds or (3 if args.quick else 5)
    cases = QUICK_CASES if args.quick else CASES
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), float32 CPU, {rounds} timing rounds"
    )

    memory_at_paper_shape: dict[str, float] = {}
    for batch, dim in cases:
        for kind in KINDS:
            audio, text = make_embeddings(batch, dim, kind)
            loss_fns = {name: objective_loss(build_objective({"name": name})) for name in OBJECTIVES}
            uwd_term = UnbalancedFeatureTransport()
            loss_fns["uwd term"] = lambda a, t, term=uwd_term: term(a, t).loss
            samples = time_side_by_side(loss_fns, audio, text, rounds)
            fastest = min(samples["contrastive"])
            print(f"\nbatch {batch}, dim {dim}, {kind} embeddings: forward + backward")
            print(f"  {'objective':<12} {'median ms':>10} {'min ms':>9} {'min / contrastive min':>22}")
            for name, values in samples.items():
                print(
                    f"  {name:<12} {1e3 * statistics.median(values):10.2f} {1e3 * min(values):9.2f} "
                    f"{min(values) / fastest:22.1f}"
                )
            report = memory_report(audio, text, with_autograd_plan=dim <= 512)
            print("  UWD term memory (MiB, torch CPU allocator):")
            for name, value in report.items():
                print(f"    {name:<44} {value:8.2f}")
            if (batch, dim) == (32, 512):
                memory_at_paper_shape[kind] = report["uwd term peak"]

    print(
        "\nGoal: UWD term peak extra memory <= 8 MiB at batch 32, dim 512 (DART App. C: ~2 MB, detached plan)"
    )
    for kind, peak in memory_at_paper_shape.items():
        verdict = "met" if peak <= UWD_MEMORY_TARGET_MIB else "NOT met"
        print(
            f"  {kind:<14} {peak:6.2f} MiB = {peak * MIB / 1e6:5.2f} MB "
            f"({peak * MIB / 1e6 / PAPER_UWD_MEMORY_MB:.1f}x the paper's 2 MB): {verdict}"
        )
    print("Solver-vs-POT speed goals: see benchmarks/ot_solvers.py.")


if __name__ == "__main__":
    main()

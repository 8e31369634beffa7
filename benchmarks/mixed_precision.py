"""Objectives under bf16 autocast: how far their gradients are from the float32 ones, and the Mahalanobis gradient.

Run: ``OMP_NUM_THREADS=1 python benchmarks/mixed_precision.py [--batch 64] [--dim 256]``.

1. For every registered objective and scoring head (none, cosine, Euclidean, Mahalanobis with a
   non-trivial PSD ``M``), the relative error ``‖g_autocast − g‖ / ‖g‖`` of the gradient with respect to
   the same float32 embeddings (L2-normalised, rounded to bfloat16 values, captions = normalise(audio +
   2·noise), true-pair cosine ≈ 0.45, so that triplet's hinge is active too), computed once with ``torch.autocast("cpu", dtype=torch.bfloat16)`` around the objective
   call (what ``TrainingArguments(bf16=True)`` does) and once without; and the dtype of the loss under
   autocast. ``kcl``/``cacl`` get ``(batch, K, dim)`` captions, ``ask`` a knowledge base of 4·batch pairs.
2. The gradient ``G`` of the IOT loss (ε = 0.05) with respect to the Mahalanobis matrix ``M`` (``M = I``):
   its antisymmetric share ``‖G − Gᵀ‖/‖G‖``, its distance to the gradient of the explicit
   ``(x − y)ᵀM(x − y)``, and how far one Adam step (lr 1e-3) taken with ``G`` lands from the step taken
   with the explicit gradient (relative to that step).

Only APIs older than the two changes it measures are used (objectives up-cast to float32 under autocast; the
Mahalanobis distance expanded with ``(M + Mᵀ)/2``), with the solver from ``hf_atr.ot``, so the same script
measures the code before and after them.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

from hf_atr.knowledge.knowledge_base import KnowledgeBase
from hf_atr.objectives.mltm import inverse_ot_loss, matching_target
from hf_atr.objectives.registry import available_objectives, build_objective
from hf_atr.ot import sinkhorn_log_plan
from hf_atr.scoring_head import AtrScoringHead

CAPTIONS_PER_CLIP = {"kcl": 3, "cacl": 2}
HEADS = (None, "cosine", "euclidean", "mahalanobis")


def bf16_values(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.bfloat16().float()


def unit(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    return F.normalize(torch.randn(*shape, generator=generator), dim=-1)


def scoring_model(kind: str, dim: int, generator: torch.Generator) -> nn.Module:
    """A stand-in carrying only what objectives read: ``model.scoring_head``."""
    model = nn.Module()
    model.scoring_head = AtrScoringHead(kind, dim, math.log(1 / 0.07))
    if kind == "mahalanobis":
        factor = torch.eye(dim) + torch.randn(dim, dim, generator=generator) / math.sqrt(dim)
        with torch.no_grad():
            model.scoring_head.metric_matrix.copy_(factor @ factor.T / 2)
    return model


def gradient(objective, audio, text, model, ids, autocast: bool) -> tuple[torch.Tensor, torch.dtype]:
    audio, text = audio.clone().requires_grad_(), text.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        output = objective(audio, text, batch={"audio_ids": ids}, model=model)
    output.loss.backward()
    return torch.cat([audio.grad.flatten(), text.grad.flatten()]), output.loss.dtype


def objectives_under_autocast(batch: int, dim: int, noise: float) -> None:
    generator = torch.Generator().manual_seed(0)
    audio = bf16_values(unit((batch, dim), generator))
    captions = {
        name: bf16_values(F.normalize(audio[:, None] + noise * unit((batch, k, dim), generator), dim=-1))
        for name, k in CAPTIONS_PER_CLIP.items()
    }
    pair_captions = bf16_values(F.normalize(audio + noise * unit((batch, dim), generator), dim=-1))
    base_audio = unit((4 * batch, dim), generator)
    base = KnowledgeBase.from_embeddings(
        base_audio, F.normalize(base_audio + unit((4 * batch, dim), generator), dim=-1), num_prototypes=16
    )
    models = {kind: scoring_model(kind, dim, generator) if kind else None for kind in HEADS}
    ids = [str(row) for row in range(batch)]
    print(
        f"1. Relative gradient error under bf16 autocast, batch {batch} x dim {dim} (loss dtype under autocast)"
    )
    print("| objective | " + " | ".join(kind or "no model" for kind in HEADS) + " |")
    print("|---|" + "---|" * len(HEADS))
    for name in available_objectives():
        cells = []
        for kind in HEADS:
            text = captions.get(name, pair_captions)
            runs = []
            for autocast in (False, True):
                objective = build_objective({"name": name})
                if name == "ask":
                    objective.knowledge_base = base
                runs.append(gradient(objective, audio, text, models[kind], ids, autocast))
            (reference, _), (mixed, dtype) = runs
            error = ((mixed - reference).norm() / reference.norm()).item()
            cells.append(f"{error:.1e} ({str(dtype).removeprefix('torch.')})")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def mahalanobis_gradient(batch: int, dim: int) -> None:
    generator = torch.Generator().manual_seed(1)
    audio = unit((batch, dim), generator)
    text = F.normalize(audio + 0.8 * unit((batch, dim), generator), dim=-1)
    target = matching_target(torch.eye(batch, dtype=torch.bool))

    def iot_gradient(cost: torch.Tensor, metric: torch.Tensor) -> torch.Tensor:
        inverse_ot_loss(sinkhorn_log_plan(cost, 0.05, tol=1e-7), target).backward()
        return metric.grad

    head = AtrScoringHead("mahalanobis", dim, 0.0)
    explicit_metric = torch.eye(dim, requires_grad=True)
    difference = audio[:, None, :] - text[None, :, :]
    explicit_cost = (
        torch.einsum("nmd,de,nme->nm", difference, explicit_metric, difference).clamp(min=1e-12).sqrt()
    )

    def adam_step(grad: torch.Tensor) -> torch.Tensor:
        metric = nn.Parameter(torch.eye(dim))
        optimizer = torch.optim.Adam([metric], lr=1e-3)
        metric.grad = grad.clone()
        optimizer.step()
        return metric.detach() - torch.eye(dim)

    head_gradient = iot_gradient(head.distance(audio, text), head.metric_matrix)
    explicit_gradient = iot_gradient(explicit_cost, explicit_metric)
    asymmetry = (head_gradient - head_gradient.T).norm() / head_gradient.norm()
    error = (head_gradient - explicit_gradient).norm() / explicit_gradient.norm()
    true_step = adam_step(explicit_gradient)
    step_error = (adam_step(head_gradient) - true_step).norm() / true_step.norm()
    print(f"\n2. IOT gradient w.r.t. the Mahalanobis M, batch {batch} x dim {dim}, M = I")
    print(f"   ||G - G^T|| / ||G||                     = {asymmetry.item():.3g}")
    print(f"   ||G - G_explicit|| / ||G_explicit||     = {error.item():.3g}")
    print(f"   one Adam step: ||step - step_explicit|| / ||step_explicit|| = {step_error.item():.3g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument(
        "--noise", type=float, default=2.0, help="caption = normalise(audio + noise·unit noise)"
    )
    args = parser.parse_args()
    objectives_under_autocast(args.batch, args.dim, args.noise)
    mahalanobis_gradient(args.batch, args.dim)


if __name__ == "__main__":
    main()

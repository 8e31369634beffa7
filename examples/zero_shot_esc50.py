"""Zero-shot sound classification on ESC-50 with a saved hf-atr model, per fold.

Every class becomes text through caption templates (``"This is a sound of {class}."``; several templates
are averaged into one class embedding, then re-normalised, as CLIP's prompt ensembles are). Each clip is
classified as the class whose text scores highest under the model's scoring head.

The metrics reuse :func:`hf_atr.evaluation.retrieval.retrieval_metrics` with the clips as queries and the
classes as the gallery (one relevant class per clip):

- ``accuracy``: audio -> class R@1 (the top class is the true one);
- ``mAP@10``: audio -> class mAP@10, i.e. the mean reciprocal rank of the true class within the top 10;
- ``class_to_audio_mAP@10``: each class text retrieving the fold's clips of that class.

Each fold's clip count is printed; a fold with fewer clips than ``--min-clips`` (default: one per class)
gets no metrics (clips skipped with ``--missing skip`` can leave a fold nearly empty, and its numbers
would mean nothing).

Example::

    python examples/zero_shot_esc50.py --model runs/atr-clotho --esc50-dir ~/data/ESC-50-master
    python examples/zero_shot_esc50.py --model runs/atr-clotho --esc50-dir ESC-50 --folds 5 \\
        --template "This is a sound of {class}." --template "A recording of {class}."
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import torch
from datasets import concatenate_datasets

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.data.corpus_utils import expand_path
from hf_atr.data.esc50 import ESC50_DEFAULT_TEMPLATES, ESC50_FOLDS, class_prompts, load_esc50
from hf_atr.encoding import encode_audio, encode_text
from hf_atr.evaluation.evaluator import head_similarity
from hf_atr.evaluation.retrieval import retrieval_metrics

METRICS = {"accuracy": "t2a_R@1", "mAP@10": "t2a_mAP@10", "class_to_audio_mAP@10": "a2t_mAP@10"}
"""Reported name -> key of retrieval_metrics with clips as queries and classes as the gallery."""


@torch.no_grad()
def class_embeddings(
    model: AtrDualEncoderModel, processor: AtrProcessor, class_names: Sequence[str], templates: Sequence[str]
) -> torch.Tensor:
    """``(n_classes, dim)``: the mean of each class's template embeddings, L2-normalised."""
    prompts = [prompt for name in class_names for prompt in class_prompts(name, templates)]
    prompt_embeds = encode_text(model, processor, prompts).view(len(class_names), len(templates), -1)
    return torch.nn.functional.normalize(prompt_embeds.mean(dim=1), dim=-1)


def zero_shot_metrics(
    scores: torch.Tensor, labels: Sequence[str], class_names: Sequence[str]
) -> dict[str, float]:
    """Metrics of ``scores: (n_clips, n_classes)`` for clips whose true classes are ``labels``."""
    class_index = {name: index for index, name in enumerate(class_names)}
    true_class = torch.tensor([class_index[label] for label in labels])
    metrics = retrieval_metrics(scores, true_class)
    return {name: metrics[key] for name, key in METRICS.items()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", required=True, help="Directory of a saved AtrDualEncoderModel + AtrProcessor."
    )
    parser.add_argument(
        "--esc50-dir", type=expand_path, required=True, help="The ESC-50 directory (meta/ and audio/)."
    )
    parser.add_argument(
        "--folds", type=int, nargs="+", choices=ESC50_FOLDS, help="Folds to test (default: all)."
    )
    parser.add_argument(
        "--template",
        dest="templates",
        action="append",
        help=f"Caption template with {{class}}; repeat to ensemble (default: {ESC50_DEFAULT_TEMPLATES[0]!r}).",
    )
    parser.add_argument(
        "--missing", choices=("error", "skip"), default="error", help="Raise on or skip bad clips."
    )
    parser.add_argument(
        "--min-clips",
        type=int,
        help="Folds with fewer clips get no metrics (default: the number of classes, one clip per class).",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output-json", type=expand_path, help="Also write the metrics to this JSON file.")
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    args = build_parser().parse_args(argv)
    templates = tuple(args.templates or ESC50_DEFAULT_TEMPLATES)
    model = AtrDualEncoderModel.from_pretrained(args.model).to(args.device).eval()
    processor = AtrProcessor.from_pretrained(args.model)
    folds = load_esc50(args.esc50_dir, folds=args.folds, templates=templates, missing=args.missing)
    class_names = sorted(set(concatenate_datasets(list(folds.values()))["label"]))
    class_embeds = class_embeddings(model, processor, class_names, templates)
    similarity = head_similarity(model)

    min_clips = args.min_clips if args.min_clips is not None else len(class_names)
    counts = {split: len(fold) for split, fold in folds.items()}
    evaluated = [split for split, count in counts.items() if count >= min_clips]
    print(f"Zero-shot ESC-50, {len(class_names)} classes, templates {list(templates)}")
    for split, count in counts.items():
        verdict = "" if split in evaluated else f" < {min_clips} (--min-clips): no metrics"
        print(f"{split}: {count} clip(s){verdict}")
    if not evaluated:
        raise SystemExit(
            f"No fold has at least {min_clips} clips ({counts}): no metrics. Check the clips skipped above, "
            "or lower --min-clips."
        )

    results: dict[str, dict[str, float]] = {}
    all_scores, all_labels = [], []
    for split in evaluated:
        fold = folds[split]
        audio_embeds = encode_audio(model, processor, fold, batch_size=args.batch_size)
        scores = similarity(class_embeds, audio_embeds).T
        results[split] = {**zero_shot_metrics(scores, fold["label"], class_names), "clips": len(fold)}
        all_scores.append(scores)
        all_labels.extend(fold["label"])
    if len(evaluated) > 1:
        results["all"] = {
            **zero_shot_metrics(torch.cat(all_scores), all_labels, class_names),
            "clips": len(all_labels),
        }

    print(f"{'split':>8} {'clips':>6} " + " ".join(f"{name:>22}" for name in METRICS))
    for split, metrics in results.items():
        print(
            f"{split:>8} {metrics['clips']:>6} "
            + " ".join(f"{100 * metrics[name]:>22.2f}" for name in METRICS)
        )
    if args.output_json is not None:
        args.output_json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()

"""Zero-shot classification of a folder of recordings labelled by their file names, with a report.

Each audio file's class is its name without extension and trailing digits (``dog.wav`` -> ``dog``,
``birds1.wav`` -> ``birds``, ``car-horn.wav`` -> ``car horn``); every class found becomes a choice, and
:class:`hf_atr.evaluation.zero_shot.ZeroShotEvaluator` classifies every clip against all of them (prompt
templates, the model's scoring head; a tie with the true class counts against it). Unreadable files are
skipped and named.

Example (a folder of labelled Freesound clips: ``dog.wav``, ``rain.wav``, ``car-horn.wav``, ...)::

    python examples/zero_shot_folder.py --model outputs/demo/model \\
        --audio-dir freesound-labelled --report reports/freesound
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path

import soundfile

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.data.audio import AUDIO_EXTENSIONS
from hf_atr.data.corpus_utils import audio_value, build_split, expand_path
from hf_atr.data.schema import atr_features
from hf_atr.evaluation.zero_shot import ZeroShotEvaluator


def label_of(path: Path) -> str:
    """The class a file name stands for: ``"birds1.wav"`` -> ``"birds"``, ``"car-horn.wav"`` -> ``"car_horn"``."""
    return re.sub(r"[\s_-]+", "_", re.sub(r"\d+$", "", path.stem).strip(" _-")).lower()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", required=True, help="Directory of a saved AtrDualEncoderModel + AtrProcessor."
    )
    parser.add_argument(
        "--audio-dir", type=expand_path, required=True, help="Folder of labelled audio files."
    )
    parser.add_argument(
        "--template",
        dest="templates",
        action="append",
        help="Prompt template with {} or {class}; repeat to average several (default: 'This is a sound of {class}.').",
    )
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--report", type=expand_path, help="Write the figures and report.html here.")
    parser.add_argument(
        "--output-json", type=expand_path, help="Also write the metrics and predictions here."
    )
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    args = build_parser().parse_args(argv)
    files = sorted(path for path in args.audio_dir.iterdir() if path.suffix.lower() in AUDIO_EXTENSIONS)
    readable, skipped = [], []
    for path in files:
        try:
            soundfile.info(str(path))
            readable.append(path)
        except (RuntimeError, soundfile.LibsndfileError) as error:
            skipped.append(f"{path.name} ({error})")
    if skipped:
        print(f"Skipped {len(skipped)} unreadable file(s): {', '.join(skipped)}")
    if not readable:
        raise SystemExit(f"No readable audio files ({', '.join(AUDIO_EXTENSIONS)}) in {args.audio_dir}.")
    rows = [
        {"audio": audio_value(path), "audio_id": path.name, "captions": [], "label": label_of(path)}
        for path in readable
    ]
    clips = build_split(rows, atr_features(with_label=True))
    model = AtrDualEncoderModel.from_pretrained(args.model).eval()
    processor = AtrProcessor.from_pretrained(args.model)
    evaluator = ZeroShotEvaluator(
        clips,
        processor,
        labels=sorted(set(clips["label"])),  # the folder's classes are the names found in it
        templates=args.templates,
        batch_size=args.batch_size,
        split=args.audio_dir.name,
    )
    predictions = evaluator.predict(model)
    metrics = predictions.metrics()
    predicted = [predictions.class_names[index] for index in predictions.predicted_classes().tolist()]
    print(
        f"{len(predictions.clip_rows)} clips, {len(predictions.class_names)} classes, "
        f"templates {list(evaluator.templates)}"
    )
    kept = predictions.clip_rows.tolist()  # the evaluator leaves out (and names) clips it cannot decode
    labels = clips["label"]
    for row, guess in zip(kept, predicted):
        path, label = readable[row], labels[row]
        print(f"  {path.name:<24} {label:<16} -> {guess}{'' if guess == label else '  (wrong)'}")
    for name, value in metrics.items():
        print(f"{name}: {100 * value:.1f} %")
    if args.report is not None:
        print(f"Report written to {evaluator.write_report(predictions, args.report).path}")
    if args.output_json is not None:
        predictions_by_file = {readable[row].name: guess for row, guess in zip(kept, predicted)}
        args.output_json.write_text(
            json.dumps({"metrics": metrics, "predictions": predictions_by_file}, indent=2)
        )
    return metrics


if __name__ == "__main__":
    main()

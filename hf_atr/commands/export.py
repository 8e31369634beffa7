"""``hf-atr export``: a saved model as a sentence-transformers folder or as ONNX graphs of its two encoders.

The work is :mod:`hf_atr.export` (``export_sentence_transformers``, ``export_onnx``); this module checks the command
line, loads the model and its processor, and prints what was written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import checked_model

FORMATS = ("sentence-transformers", "onnx")
QUANTIZATIONS = ("int8",)


def add_export_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr export --model DIR --format {sentence-transformers,onnx} --out OUT [--quantize int8]``."""
    parser = subparsers.add_parser(
        "export",
        help="export a saved model for sentence-transformers or ONNX Runtime",
        description="Write a saved model and its processor to --out as a sentence-transformers 6 folder "
        "(SentenceTransformer(OUT).encode of text and audio, after `import hf_atr` or with trust_remote_code=True) "
        "or as two ONNX graphs, text_encoder.onnx and audio_encoder.onnx, with the processor's files and "
        "onnx_export.json (scoring, logit scale and bias, embedding size, Mahalanobis map, the index fingerprint). "
        "Each ONNX graph is loaded in ONNX Runtime and checked against the torch model on a probe batch before "
        "the command reports success. See docs/export.md.",
    )
    parser.add_argument("--model", required=True, help="directory of a saved model + processor")
    parser.add_argument("--format", required=True, choices=FORMATS, help="what to write")
    parser.add_argument(
        "--out", required=True, help="directory to write to (created; must be empty if it exists)"
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        default=None,
        help="onnx only: also apply ONNX Runtime's dynamic int8 quantisation to both graphs",
    )
    parser.set_defaults(handler=run_export)
    return parser


def run_export(args: argparse.Namespace) -> int:
    """Load ``--model`` and write the ``--format`` export to ``--out``; returns the exit status."""
    out = Path(args.out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SystemExit(f"--out {args.out} exists and is not an empty directory; give a new one.")
    if args.quantize is not None and args.format != "onnx":
        raise SystemExit("--quantize applies to --format onnx only.")
    model_path = checked_model(args.model)

    from hf_atr.modeling_atr import AtrDualEncoderModel
    from hf_atr.processing_atr import AtrProcessor

    model = AtrDualEncoderModel.from_pretrained(model_path).eval()
    processor = AtrProcessor.from_pretrained(model_path)
    if args.format == "sentence-transformers":
        from hf_atr.export.sentence_transformers_format import export_sentence_transformers

        export_sentence_transformers(model, processor, out)
        print(
            f"Wrote a sentence-transformers folder to {out} (similarity: see config_sentence_transformers.json)."
        )
        return 0
    from hf_atr.export.onnx_graphs import export_onnx

    report = export_onnx(model, processor, out, quantize=args.quantize)
    print(report.summary())
    return 0


__all__ = ["FORMATS", "add_export_parser", "run_export"]

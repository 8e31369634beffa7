"""Share a trained model on the Hub: weights, processor, model card (with evaluation table) and index.

The card is generated from the model (backbones, projection, scoring, objective, hyperparameters and
paper) and from an evaluation run on SynthCaps test clips (`--eval-clips`, 0 to skip). `--dry-run DIR`
writes exactly the files that would be uploaded into DIR and prints the card, without any network access.

    hf-atr demo
    python examples/push_to_hub.py --model outputs/demo/model --repo-id you/atr-synthcaps --license apache-2.0 \\
        --dry-run outputs/staged
    huggingface-cli login && python examples/push_to_hub.py --model outputs/demo/model --repo-id you/atr-synthcaps \\
        --license apache-2.0 --index-dir outputs/demo/index

The demo model may carry apache-2.0: its weights come from random initialisation and synthcaps, which hf-atr
generates. A model trained on other data takes that data's terms into account (ESC-50 is CC BY-NC).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import hf_atr  # noqa: F401  (registers the model type with the Auto classes)
from hf_atr.data.schema import LANGUAGES
from hf_atr.data.synthcaps import load_synthcaps
from hf_atr.evaluation.evaluator import RetrievalEvaluator
from hf_atr.modeling_atr import AtrDualEncoderModel
from hf_atr.pipelines.sharing import push_to_hub, stage_upload
from hf_atr.processing_atr import AtrProcessor


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="a saved model + processor directory")
    parser.add_argument("--repo-id", required=True, help="Hub repository, e.g. you/atr-synthcaps")
    parser.add_argument(
        "--index-dir", help="a retrieval index saved with pipe.save_index(), uploaded with the model"
    )
    parser.add_argument(
        "--eval-clips", type=int, default=100, help="SynthCaps test clips for the card (0: none)"
    )
    parser.add_argument("--training-data", default="synthcaps", help="training corpus named in the card")
    parser.add_argument(
        "--license",
        default=None,
        help="the Hub's licence id for the card (e.g. apache-2.0; the demo model's is apache-2.0); unset: no licence "
        "is claimed, and the card says that one must be set",
    )
    parser.add_argument("--private", action="store_true")
    parser.add_argument("--dry-run", metavar="DIR", help="write the files to DIR instead of uploading")
    args = parser.parse_args()

    model = AtrDualEncoderModel.from_pretrained(args.model)
    processor = AtrProcessor.from_pretrained(args.model)
    eval_results = None
    if args.eval_clips > 0:
        test = load_synthcaps(num_train=0, num_validation=0, num_test=args.eval_clips)["test"]
        eval_results = RetrievalEvaluator(test, processor, languages=list(LANGUAGES))(model)
        print(
            f"SynthCaps test ({args.eval_clips} clips, 8 languages): T2A R@1 = {100 * eval_results['t2a_R@1']:.1f}%"
        )
    upload = dict(
        processor=processor,
        index_dir=args.index_dir,
        eval_results=eval_results,
        training_data=args.training_data,
        license=args.license,
    )
    if args.dry_run:
        files = stage_upload(model, args.dry_run, repo_id=args.repo_id, **upload)
        print(f"Would upload to {args.repo_id}:")
        for path in files:
            print(f"  {path.relative_to(args.dry_run).as_posix()}  ({path.stat().st_size:,} bytes)")
        print("\n" + (Path(args.dry_run) / "README.md").read_text())
        return
    commit = push_to_hub(model, args.repo_id, private=args.private, **upload)
    print(f"Pushed: {commit.commit_url}")


if __name__ == "__main__":
    main()

"""Index a corpus with `pipeline("audio-text-retrieval")`, search it both ways, classify zero-shot, persist.

Uses the SynthCaps test split (generated offline) as the corpus. With a trained model (e.g. the one
`hf-atr demo` writes to outputs/demo/model) the hits make sense; without --model a random-init tiny
model is built and saved first, so the script runs anywhere but its rankings are chance.

    hf-atr demo && python examples/search.py --model outputs/demo/model
    python examples/search.py                       # untrained tiny model, for a smoke run
"""

from __future__ import annotations

import argparse
from pathlib import Path

from transformers import pipeline

import hf_atr  # noqa: F401  (registers the model type with the Auto classes)
from hf_atr.data.synthcaps import load_synthcaps
from hf_atr.data.synthcaps_audio import SOUND_EVENTS
from hf_atr.data.synthcaps_grammar import event_phrase
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.modeling_atr import AtrDualEncoderModel
from hf_atr.processing_atr import AtrProcessor
from hf_atr.tokenization import train_caption_tokenizer

QUERIES = ("a siren wails", "a high beep followed by a low tone", "quiet white noise")


def untrained_model_dir(output_dir: Path, captions: list[str]) -> Path:
    """Save a random-init tiny AST + BERT model with its processor, for a run without a trained model."""
    processor = AtrProcessor(tiny_feature_extractor(), train_caption_tokenizer(captions, vocab_size=1000))
    model = AtrDualEncoderModel(tiny_model_config(processor.feature_extractor, len(processor.tokenizer)))
    model_dir = output_dir / "untrained_model"
    model.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)
    return model_dir


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", help="a saved model + processor directory (default: an untrained tiny model)"
    )
    parser.add_argument(
        "--num-clips", type=int, default=100, help="SynthCaps test clips to index (default: 100)"
    )
    parser.add_argument(
        "--output-dir", default="outputs/search_example", help="where the untrained model goes"
    )
    parser.add_argument("--top-k", type=int, default=3)
    args = parser.parse_args()

    corpus = load_synthcaps(num_train=0, num_validation=0, num_test=args.num_clips, languages=["eng"])["test"]
    model_dir = (
        Path(args.model)
        if args.model
        else untrained_model_dir(Path(args.output_dir), sum(corpus["captions"], []))
    )
    if not args.model:
        print(f"No --model given: using an untrained tiny model saved in {model_dir} (rankings are chance).")

    pipe = pipeline("audio-text-retrieval", model=str(model_dir))
    pipe.index(corpus)  # every clip, and every caption as "<audio_id>#<slot>"
    print(f"Indexed {len(pipe.audio_index)} clips and {len(pipe.text_index)} captions.")

    captions_by_clip = dict(zip(corpus["audio_id"], corpus["captions"]))
    for query in QUERIES:
        print(f"\nText -> audio: {query!r}")
        for hit in pipe(query, top_k=args.top_k):
            print(f"  {hit['id']}  score={hit['score']:.3f}  ({captions_by_clip[hit['id']][0]})")

    clip = corpus[0]
    print(f"\nAudio -> text for {clip['audio_id']} (true captions: {clip['captions'][0]!r}, ...)")
    for hit in pipe(clip["audio"], top_k=args.top_k):
        print(f"  {hit['id']}  score={hit['score']:.3f}  {hit['caption']!r}")

    labels = [event_phrase(event) for event in SOUND_EVENTS]
    print(f"\nZero-shot, {clip['audio_id']} (first event: {event_phrase(clip['label'])}):")
    for entry in pipe.classify(clip["audio"], labels=labels)[:3]:
        print(f"  {entry['label']}: {entry['score']:.3f}")

    written = pipe.save_index()
    reloaded = pipeline("audio-text-retrieval", model=str(model_dir))  # finds the index next to the model
    assert reloaded(QUERIES[0], top_k=args.top_k) == pipe(QUERIES[0], top_k=args.top_k)
    print(f"\nIndex saved to {written[0].parent} and reloaded with identical results.")


if __name__ == "__main__":
    main()

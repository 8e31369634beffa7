"""Moment retrieval: the sliding-window baseline against the refined proposer, and a clip-trained
model before against the same model after moment fine-tuning, side by side in one run.

No real recording at hand was 30 s long or more (the ``--backgrounds`` samples: 75 clips, the longest 29 s) and no
pretrained weights were reachable, so:

* **events**: SynthCaps clips (``hf_atr.data.synthcaps``: synthetic sounds with compositional captions, where a
  small model can learn) of ``--event-seconds`` (1, 2, 4 and 8 s in turn: shorter than the model's 2-s window, as
  long, and longer), each split's own clips for its recordings;
* **backgrounds**: the real clips under ``--backgrounds`` joined end to end (``hf_atr.data.moment_synthesis``
  joins them with a crossfade); synthetic noise when that folder is missing (said in the output);
* **recordings**: ``synthesize_moments`` (Clotho-Moment's recipe): ``--seconds`` long, 2-4 events each at an SNR of
  5-15 dB; ``train`` recordings to fine-tune on, ``validation`` ones on which the refined proposer's defaults were
  chosen, ``test`` ones;
* **model before**: the demo's small AST + BERT dual encoder (``hf_atr.demo``), trained from random init on the
  SynthCaps training clips as clips (``--clip-steps``);
* **model after**: the same weights fine-tuned on the training recordings' moments (``--moment-steps``, the
  ``pairs_from_moments`` view: crops inside each moment paired with its query, crops outside the recording's
  moments as unpaired negatives, the contrastive objective, features on the training device);
* **evaluation**: ``MomentEvaluator`` on the validation and test recordings (each encoded once, windows of the
  extractor's 2 s every ``--hop`` s), with the AMR paper's sliding-window baseline and the refined default proposer.

Printed: R1@0.5, R1@0.7, mAP@0.5, mAP@0.75 and mAP (in %) per split, model and proposer, the cost per hour of audio
on this CPU (encoding the windows and scoring them, the same for both proposers, and proposing the moments, in
seconds per hour of audio), and the test split's mAP by the length of the annotated moment.

    PYTHONPATH=. python benchmarks/moments.py                    # the size of docs/moments.md (< 10 min, 1 thread)
    PYTHONPATH=. python benchmarks/moments.py --event-seconds 2  # every event exactly one window long
    PYTHONPATH=. python benchmarks/moments.py --train-recordings 64 --moment-steps 400   # longer

Run from the repository root with hf_atr importable (``pip install -e .`` or ``PYTHONPATH=.``).
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile
import torch
from datasets import Dataset
from real_audio import add_real_audio_argument
from transformers import TrainingArguments, set_seed
from transformers.utils import logging as hf_logging

from hf_atr.data.audio import encode_wav
from hf_atr.data.moment_synthesis import synthesize_moments
from hf_atr.data.moments import load_moments
from hf_atr.data.schema import all_captions, atr_features, finalize_audio_column
from hf_atr.data.synthcaps import load_synthcaps
from hf_atr.data.synthcaps_audio import generate_clip
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.evaluation.moment_evaluator import MomentEvaluator
from hf_atr.metrics.moments import moment_retrieval_metrics
from hf_atr.modeling_atr import AtrDualEncoderModel
from hf_atr.moments.proposal import MomentProposalConfig, propose_moments
from hf_atr.objectives.registry import build_objective
from hf_atr.processing_atr import AtrProcessor
from hf_atr.tokenization import train_caption_tokenizer
from hf_atr.training import AtrTrainer, WaveformCollator, objective_training_setup
from hf_atr.training.moment_crops import MOMENTS_VIEW

REAL_AUDIO_HELP = (
    "folder of real clips to join into backgrounds, every WAV/FLAC under it: samples of AudioCaps and Clotho "
    "(validation) in their official layouts and labelled Freesound clips (default: the samples kept beside the "
    "checkout, if any; synthetic noise when the folder has none)"
)
METRICS = ("R1@0.5", "R1@0.7", "mAP@0.5", "mAP@0.75", "mAP")
MODELS = ("before (clips only)", "after moment fine-tuning")
PROPOSERS = {"sliding window (AMR baseline)": "sliding_window", "refined (default)": "refined"}


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--train-clips", type=int, default=512, help="SynthCaps clips the clip model trains on"
    )
    parser.add_argument("--clip-steps", type=int, default=250, help="training steps on clips (model before)")
    parser.add_argument(
        "--moment-steps", type=int, default=150, help="fine-tuning steps on moments (model after)"
    )
    parser.add_argument("--train-recordings", type=int, default=48, help="recordings fine-tuned on")
    parser.add_argument(
        "--validation-recordings",
        type=int,
        default=16,
        help="recordings the proposer's defaults were chosen on",
    )
    parser.add_argument("--test-recordings", type=int, default=16, help="recordings evaluated")
    parser.add_argument(
        "--event-seconds",
        type=float,
        nargs="+",
        default=(1.0, 2.0, 4.0, 8.0),
        help="event lengths, in turn (s)",
    )
    parser.add_argument(
        "--seconds", type=float, nargs=2, default=(30.0, 60.0), help="recording length range (s)"
    )
    parser.add_argument("--hop", type=float, default=0.5, help="hop of the scored windows (s)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    add_real_audio_argument(parser, "--backgrounds", "--real-audio", help=REAL_AUDIO_HELP)
    return parser.parse_args()


def background_files(folder: Path, scratch: Path, seed: int) -> tuple[list[Path], str]:
    """The real clips under ``folder`` (any depth), or 8 synthetic noise files when it has none."""
    found = sorted(path for path in folder.rglob("*") if path.suffix.lower() in (".wav", ".flac"))
    if found:
        return found, f"{len(found)} real clips of {folder.name}/ joined"
    rng = np.random.default_rng(seed)
    scratch.mkdir(parents=True, exist_ok=True)
    files = []
    for index in range(8):  # brown-ish noise: integrated white noise, high-passed by the mean removal
        noise = np.cumsum(rng.standard_normal(16000 * 20)) * 0.01
        path = scratch / f"noise_{index}.wav"
        soundfile.write(path, (noise - noise.mean()) / (np.abs(noise).max() + 1e-9) * 0.3, 16000)
        files.append(path)
    return files, f"synthetic noise (no clips in {folder.name}/)"


def training_arguments(
    output_dir: Path, steps: int, batch_size: int, seed: int, learning_rate: float
) -> TrainingArguments:
    return TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        weight_decay=0.01,
        warmup_steps=min(20, steps // 10),
        max_steps=steps,
        lr_scheduler_type="cosine",
        logging_steps=max(steps // 4, 1),
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=seed,
        dataloader_drop_last=True,
        disable_tqdm=True,
    )


def evaluate(
    model: AtrDualEncoderModel, processor: AtrProcessor, moments, proposer: str, hop: float, batch_size: int
):
    """The metrics, seconds per hour of audio for (encoding + scoring, proposing), and the predictions."""
    evaluator = MomentEvaluator(
        moments,
        processor,
        proposal=MomentProposalConfig(proposer=proposer),
        hop_seconds=hop,
        batch_size=batch_size,
    )
    started = time.perf_counter()
    evaluation = evaluator.evaluate(model)
    total = time.perf_counter() - started
    started = time.perf_counter()
    for curve in evaluation.curves.values():
        propose_moments(curve, evaluator.proposal)
    proposing = time.perf_counter() - started
    hours = evaluation.protocol["audio_seconds"] / 3600
    return evaluation.metrics, (total - proposing) / hours, proposing / hours, evaluation.predictions


def map_by_event_length(moments, predictions) -> dict[float, float]:
    """mAP (0.50:0.05:0.95) of the queries whose annotated moment lasts each length (seconds, to 0.1 s)."""
    lengths = {
        qid: round(windows[0][1] - windows[0][0], 1)
        for qid, windows in zip(moments["qid"], moments["windows"])
    }
    by_qid = {record["qid"]: record for record in predictions}
    result = {}
    for length in sorted(set(lengths.values())):
        qids = [qid for qid, value in lengths.items() if value == length and qid in by_qid]
        references = [
            {"qid": qid, "relevant_windows": moments["windows"][moments["qid"].index(qid)]} for qid in qids
        ]
        result[length] = moment_retrieval_metrics([by_qid[qid] for qid in qids], references)["mAP"]
    return result


def event_clips(split: str, count: int, durations: tuple[float, ...], seed: int) -> Dataset:
    """``count`` SynthCaps clips of ``split`` in the shared schema, clip ``i`` lasting ``durations[i % len(durations)]``
    seconds (its scene rendered over that length, so its caption describes the whole clip)."""
    rows: dict[str, list] = {"audio": [], "audio_id": [], "captions": []}
    for index in range(count):
        duration = durations[index % len(durations)]
        clip = generate_clip(split, index, duration=duration, sampling_rate=16000, seed=seed)
        audio_id = f"synthcaps_{split}_{index:06d}_{duration:g}s"
        rows["audio"].append({"bytes": encode_wav(clip.waveform, 16000), "path": f"{audio_id}.wav"})
        rows["audio_id"].append(audio_id)
        rows["captions"].append(clip.captions["eng"])
    return finalize_audio_column(Dataset.from_dict(rows, features=atr_features()))


def moment_sets(args: argparse.Namespace, scratch: Path) -> tuple[dict, str]:
    """The ``train``, ``validation`` and ``test`` moment sets (each split's own SynthCaps clips over the joined
    backgrounds), and what the backgrounds are."""
    backgrounds, background_note = background_files(args.backgrounds, scratch / "noise", args.seed)
    counts = {
        "train": args.train_recordings,
        "validation": args.validation_recordings,
        "test": args.test_recordings,
    }
    sets = {}
    for split, count in counts.items():
        clips = event_clips(split, 4 * count, tuple(args.event_seconds), args.seed)
        synthesize_moments(
            clips, backgrounds, scratch / "moments", count, duration_range=tuple(args.seconds), events_range=(2, 4),
            snr_db=(5.0, 15.0), sampling_rate=16000, seed=args.seed, split=split,
        )  # fmt: skip
        sets[split] = load_moments(scratch / "moments" / f"moments_{split}_release.jsonl")
    return sets, background_note


def trained_models(args: argparse.Namespace, corpus, train_moments, scratch: Path):
    """The processor, the model before (trained on 2-s clips) and after (+ moment fine-tuning), and the seconds
    each training took."""
    tokenizer = train_caption_tokenizer(all_captions(corpus["train"]), vocab_size=3000)
    feature_extractor = tiny_feature_extractor()
    processor = AtrProcessor(feature_extractor, tokenizer)
    model = AtrDualEncoderModel(tiny_model_config(feature_extractor, len(tokenizer)))
    features = processor.extract_audio_features(corpus["train"], keep_audio=False)
    started = time.perf_counter()
    AtrTrainer(
        model=model,
        args=training_arguments(scratch / "clips", args.clip_steps, args.batch_size, args.seed, 1e-3),
        train_dataset=features,
        processing_class=processor,
    ).train()
    clip_seconds = time.perf_counter() - started

    tuned = copy.deepcopy(model)
    objective = build_objective({"name": "contrastive"})
    waveforms = WaveformCollator(processor, seed=args.seed)
    setup = objective_training_setup(
        objective, train_moments, processor, seed=args.seed, waveforms=waveforms, view=MOMENTS_VIEW
    )
    started = time.perf_counter()
    AtrTrainer(
        model=tuned,
        args=training_arguments(scratch / "moments_run", args.moment_steps, args.batch_size, args.seed, 3e-4),
        train_dataset=setup.train_dataset,
        data_collator=setup.data_collator,
        processing_class=processor,
        objective=objective,
        audio_features="device",
    ).train()
    return processor, model, tuned, clip_seconds, time.perf_counter() - started


def main() -> None:
    args = parse_arguments()
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    set_seed(args.seed)
    scratch = Path(tempfile.mkdtemp(prefix="hf_atr_moments_"))
    run_started = started = time.perf_counter()
    corpus = load_synthcaps(
        num_train=args.train_clips, num_validation=0, num_test=0, languages=["eng"], seed=args.seed
    )
    sets, background_note = moment_sets(args, scratch)
    train_moments, test_moments = sets["train"], sets["test"]
    data_seconds = time.perf_counter() - started
    processor, model, tuned, clip_seconds, moment_seconds = trained_models(
        args, corpus, train_moments, scratch
    )
    feature_extractor = processor.feature_extractor

    rows, by_length = [], {}
    for split in ("validation", "test"):
        for model_name, evaluated in zip(MODELS, (model, tuned)):
            for proposer_name, proposer in PROPOSERS.items():
                metrics, encoding_cost, proposal_cost, predictions = evaluate(
                    evaluated, processor, sets[split], proposer, args.hop, args.batch_size
                )
                rows.append((split, model_name, proposer_name, metrics, encoding_cost, proposal_cost))
                if split == "test":
                    by_length[(model_name, proposer_name)] = map_by_event_length(sets[split], predictions)

    recordings = len(set(test_moments["recording_id"]))
    lengths = "/".join(f"{seconds:g}" for seconds in args.event_seconds)
    print(
        f"Moment retrieval on synthetic data: {len(test_moments)} test queries over {recordings} recordings of "
        f"{args.seconds[0]:g}-{args.seconds[1]:g} s (SynthCaps clips of {lengths} s, 2-4 per recording, SNR 5-15 dB, "
        f"over {background_note}); windows of {feature_extractor.max_length / 100:g} s every {args.hop:g} s; torch "
        f"{torch.__version__}, {args.threads} thread(s), CPU {torch.backends.cpu.get_cpu_capability()}."
    )
    print(
        f"Model before: demo-size AST + BERT, {args.clip_steps} steps on {args.train_clips} 2-s SynthCaps clips "
        f"({clip_seconds:.0f} s); after: + {args.moment_steps} steps on the moments of {args.train_recordings} "
        f"training recordings ({len(train_moments)} queries; {moment_seconds:.0f} s). Data built in {data_seconds:.0f} s. "
        "The refined proposer's defaults were chosen on the validation split of the default --event-seconds."
    )
    header = f"{'split':<12}{'model':<26}{'proposer':<31}" + "".join(f"{name:>9}" for name in METRICS)
    print(header + f"{'encode+score s/h':>18}{'propose s/h':>13}")
    for split, model_name, proposer_name, metrics, encoding_cost, proposal_cost in rows:
        cells = "".join(f"{100 * metrics[name]:>9.2f}" for name in METRICS)
        print(
            f"{split:<12}{model_name:<26}{proposer_name:<31}{cells}{encoding_cost:>18.1f}{proposal_cost:>13.2f}"
        )
    by_key = {(row[0], row[1], row[2]): row[3] for row in rows if row[0] == "test"}
    (before, after), (baseline, refined) = MODELS, list(PROPOSERS)
    for name in ("R1@0.7", "mAP"):
        tuning = [
            100 * (by_key[("test", after, p)][name] - by_key[("test", before, p)][name])
            for p in (baseline, refined)
        ]
        proposing = [
            100 * (by_key[("test", m, refined)][name] - by_key[("test", m, baseline)][name])
            for m in (before, after)
        ]
        print(
            f"test {name}: after - before {tuning[0]:+.2f} points (baseline), {tuning[1]:+.2f} (refined); "
            f"refined - baseline {proposing[0]:+.2f} points (before), {proposing[1]:+.2f} (after)"
        )
    lengths = sorted({length for values in by_length.values() for length in values})
    print(
        f"test mAP by the annotated moment's length:\n{'model':<26}{'proposer':<31}"
        + "".join(f"{f'{length:g} s':>9}" for length in lengths)
    )
    for (model_name, proposer_name), values in by_length.items():
        print(
            f"{model_name:<26}{proposer_name:<31}"
            + "".join(f"{100 * values[length]:>9.2f}" for length in lengths)
        )
    print(f"Whole run: {time.perf_counter() - run_started:.0f} s.")


if __name__ == "__main__":
    main()

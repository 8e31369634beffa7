"""``hf-atr index``: encode a folder of audio files, a caption file or a saved dataset into a retrieval index.

The work is :class:`hf_atr.pipelines.indexing.IndexingRun` (the same that ``pipe.index`` runs); this module checks
the command line, joins the process group under ``accelerate launch`` / ``torchrun``, stops cleanly (the index so far
saved) and prints what was indexed.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import (
    add_dtype_argument,
    add_windowing_arguments,
    checked_device_argument,
    load_retrieval_pipeline,
    model_dtype_arguments,
    parsed_windowing,
    process_group,
    rebuild_advice,
    saved_split,
)

if TYPE_CHECKING:
    from hf_atr.pipelines.indexing import IndexingRun

DEFAULT_SAVE_EVERY = 1000
"""``hf-atr index`` saves the index after this many files (and at the end, and when it stops early)."""


def add_index_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr index --model DIR --audio-dir D --out INDEX``."""
    parser = subparsers.add_parser(
        "index",
        help="encode a folder of audio files (and/or captions) into a searchable index",
        description="Encode every audio file under --audio-dir (recursively; any extension in "
        "hf_atr.data.audio.AUDIO_EXTENSIONS) once with the model's audio encoder and save the embeddings as "
        "a retrieval index (safetensors + ids JSON) in --out. Ids are the files' paths relative to "
        "--audio-dir, which the index records so that hits resolve from anywhere. A file longer than the "
        "feature extractor's window is stored window by window with each window's time span (--pool: one "
        "pooled entry per file), so search returns files with their best-matching span. Files that cannot "
        "be decoded (empty, not audio, corrupt, macOS ._* AppleDouble files) are skipped and listed in "
        "OUT/skipped.tsv unless --strict. The index is saved every --save-every files and when the job stops "
        "early; --append adds the files not yet indexed. --captions FILE adds a caption index for "
        "audio-to-text search; --dataset DIR indexes a saved shared-schema dataset (audio and captions). "
        "Under `accelerate launch` or `torchrun` each process encodes a share of the files and one index "
        "is written, the same as one process writes.",
    )
    parser.add_argument("--model", required=True, help="directory (or Hub id) of a saved model + processor")
    parser.add_argument("--audio-dir", default=None, help="folder of audio files to index")
    parser.add_argument(
        "--captions",
        default=None,
        help="captions to index for audio-to-text search: a .txt file (one per line), a .csv with a 'caption' "
        "column or caption_1..caption_N (Clotho; ids from 'id' or 'file_name'), or a .jsonl of "
        '{"caption", "id"} objects',
    )
    parser.add_argument(
        "--encoding",
        default="utf-8",
        help="text encoding of the --captions file (a Python codec name such as cp1252; default utf-8)",
    )
    parser.add_argument(
        "--dataset", default=None, help="a dataset saved with `save_to_disk` in the hf-atr schema"
    )
    parser.add_argument("--split", default="test", help="split of a --dataset DatasetDict (default: test)")
    parser.add_argument("--out", required=True, help="directory to write the index to")
    parser.add_argument(
        "--kind",
        choices=("flat", "ivf", "hnsw"),
        default="flat",
        help="flat: exact search (default); ivf / hnsw: approximate, for hundreds of thousands of clips",
    )
    parser.add_argument(
        "--batch-size", type=int, default=32, help="windows encoded per forward pass (default: 32)"
    )
    parser.add_argument(
        "--device",
        default=None,
        help="encode on this torch device (cuda, cuda:1, cpu; default: where transformers puts the model, the "
        "first GPU when there is one; under torchrun each process's own)",
    )
    add_dtype_argument(parser)
    parser.add_argument(
        "--pool", action="store_true", help="one pooled entry per file instead of one per window"
    )
    parser.add_argument(
        "--pooling", choices=("mean", "max"), default="mean", help="how --pool pools windows (default: mean)"
    )
    add_windowing_arguments(parser, "long files")
    parser.add_argument(
        "--frame-seconds",
        type=float,
        default=None,
        help="for a model with frame-level embeddings (converted from PeAudioFrameLevelModel): one entry per this "
        "many seconds of its frames, pooled, so hits carry spans at that resolution (e.g. 0.2; not with --pool)",
    )
    parser.add_argument("--strict", action="store_true", help="stop at the first file that cannot be decoded")
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument(
        "--append", action="store_true", help="add to the index in --out (files not yet in it)"
    )
    existing.add_argument("--overwrite", action="store_true", help="replace an index already in --out")
    parser.add_argument(
        "--save-every",
        type=int,
        default=DEFAULT_SAVE_EVERY,
        help=f"save the index after every N files (default: {DEFAULT_SAVE_EVERY})",
    )
    parser.set_defaults(handler=run_index)
    return parser


def _entries(frame_seconds: float | None) -> str:
    """The kind of audio entries ``--frame-seconds`` makes, in words."""
    return "window entries" if frame_seconds is None else f"entries of --frame-seconds {frame_seconds:g}"


def run_index(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr index``."""
    if args.audio_dir is None and args.captions is None and args.dataset is None:
        raise SystemExit("hf-atr index: give --audio-dir, --captions or --dataset (what to index).")
    if args.dataset is not None and args.audio_dir is not None:
        raise SystemExit("hf-atr index: give either --dataset or --audio-dir, not both.")
    if args.pool and args.frame_seconds is not None:
        raise SystemExit(
            "hf-atr index: --pool makes one entry per file, spanning all of it, and --frame-seconds one entry per "
            f"{args.frame_seconds} s of its frames; give one of them."
        )
    for flag, value in (("--save-every", args.save_every), ("--batch-size", args.batch_size)):
        if value < 1:
            raise SystemExit(f"{flag} must be at least 1, got {value}.")
    audio_dir = None if args.audio_dir is None else Path(args.audio_dir).expanduser()
    if audio_dir is not None and not audio_dir.is_dir():
        raise SystemExit(f"--audio-dir {audio_dir} is not a directory.")
    files = _audio_files(audio_dir) if audio_dir is not None else []
    if audio_dir is not None and not files:
        raise SystemExit(f"No audio files under {audio_dir}.")
    captions = _read_caption_list(args.captions, args.encoding) if args.captions else None
    dataset = saved_split(Path(args.dataset).expanduser(), args.split)[0] if args.dataset else None
    out = Path(args.out).expanduser()
    if args.device is not None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise SystemExit(
            "hf-atr index: --device is for one process; under accelerate launch or torchrun each process encodes "
            "on its own device."
        )
    device = None if args.device is None else checked_device_argument(args.device)
    from hf_atr.data.audio_arrays import AudioDecodeError
    from hf_atr.distributed import rank_and_world_size
    from hf_atr.pipelines.index_storage import IndexFormatError, IndexMismatchError
    from hf_atr.pipelines.indexing import IndexingOptions, IndexingRun, check_appendable, indexed_files
    from hf_atr.pipelines.persistence import SKIPPED_FILENAME, holds_index

    existing = holds_index(out)
    if existing and not (args.append or args.overwrite):
        raise SystemExit(
            f"{out} already holds an index; pass --append to add the files not yet in it, or --overwrite to "
            "replace it."
        )
    with process_group() as process_device:
        device = process_device or device
        placement = {} if device is None else {"device": device}
        placement.update(model_dtype_arguments(args, device))
        pipe = load_retrieval_pipeline(
            args.model, index_kind=args.kind, windowing=parsed_windowing(args, args.pooling), **placement
        )
        if args.frame_seconds is not None:
            from hf_atr.frame_encoding import frame_rate_of

            try:
                frame_rate_of(pipe.model)
            except ValueError as error:
                raise SystemExit(f"hf-atr index --frame-seconds {args.frame_seconds}: {error}") from error
        options = IndexingOptions(
            args.batch_size,
            pool=args.pool,
            strict=args.strict,
            append=args.append,
            save_every=args.save_every,
            save_to=out,
        )
        try:
            run = IndexingRun(pipe, options)  # from the index in --out with --append, else from nothing
            for held_index in (pipe.audio_index, pipe.text_index):
                if held_index is not None:
                    check_appendable(held_index, pipe.model)
        except IndexMismatchError as error:
            raise SystemExit(f"hf-atr index --append: {rebuild_advice(error, args.model)}") from error
        except (IndexFormatError, ValueError) as error:
            raise SystemExit(f"hf-atr index --append: {error}") from error
        held = pipe.audio_index
        if (files or dataset is not None) and held is not None and held.frame_seconds != args.frame_seconds:
            raise SystemExit(
                f"hf-atr index --append: the audio index in {out} holds {_entries(held.frame_seconds)}, and this run "
                f"asks for {_entries(args.frame_seconds)}: "
                + (
                    "leave out --frame-seconds"
                    if held.frame_seconds is None
                    else f"pass --frame-seconds {held.frame_seconds:g}"
                )
                + " to add to it, or --overwrite to rebuild it."
            )
        started = time.perf_counter()
        try:
            if files:
                run.add_files(files, audio_dir)
            if dataset is not None:
                run.add_dataset(dataset)
            if captions is not None:
                run.add_captions(captions.ids, captions.captions)
        except (AudioDecodeError, KeyboardInterrupt) as error:
            if pipe.audio_index is not None or pipe.text_index is not None:
                pipe.save_index(out)
            stopped, then = (
                (
                    f"{error} (--strict)",
                    "repair or remove that file (or leave out --strict to skip such files and list them in "
                    f"{out / SKIPPED_FILENAME}), then run again with --append to add the rest",
                )
                if isinstance(error, AudioDecodeError)
                else ("interrupted", "run again with --append to add the rest")
            )
            raise SystemExit(
                f"hf-atr index: stopped: {stopped}. The {indexed_files(pipe)} file(s) indexed so far are "
                f"saved in {out}; {then}."
            ) from None
        pipe.save_index(out)
        if rank_and_world_size()[0] == 0:
            print(_index_summary(run, out, audio_dir, time.perf_counter() - started))
    return 0


def _index_summary(run: IndexingRun, out: Path, audio_dir: Path | None, seconds: float) -> str:
    """The line ``hf-atr index`` ends with: what ``run`` (an ``IndexingRun``) added, skipped and left out."""
    from hf_atr.distributed import rank_and_world_size
    from hf_atr.pipelines.indexing import indexed_files
    from hf_atr.pipelines.persistence import SKIPPED_FILENAME

    pipe = run.pipe
    parts = []
    if pipe.audio_index is not None and run.audio_given:
        source = f" from {audio_dir}" if audio_dir is not None else ""
        parts.append(
            f"Indexed {indexed_files(pipe) - run.files_before} audio file(s){source} into {out}: "
            f"the index holds {indexed_files(pipe)} file(s) in {len(pipe.audio_index)} entries"
        )
    if pipe.text_index is not None and len(pipe.text_index) > run.captions_before:
        parts.append(
            f"{'indexed' if parts else 'Indexed'} {len(pipe.text_index) - run.captions_before} caption(s) "
            f"into {out} ({len(pipe.text_index)} in the caption index)"
        )
    skipped_now = sum(item.name in run.attempted for item in pipe.skipped)
    if skipped_now:
        parts.append(
            f"skipped {skipped_now} file(s) that cannot be decoded ({len(pipe.skipped)} listed in "
            f"{out / SKIPPED_FILENAME})"
        )
    if run.already:
        parts.append(f"{run.already} already in the index")
    processes = rank_and_world_size()[1]
    on_processes = f" on {processes} processes" if processes > 1 else ""
    return "; ".join(parts) + f"; {seconds:.1f} s{on_processes}."


def _audio_files(audio_dir: Path) -> list[Path]:
    """Every file under ``audio_dir`` with an audio extension (AppleDouble ``._*`` files too: the index
    lists them as skipped), sorted."""
    from hf_atr.data.audio import AUDIO_EXTENSIONS

    return sorted(
        path for path in audio_dir.rglob("*") if path.is_file() and path.suffix.lower() in AUDIO_EXTENSIONS
    )


def _read_caption_list(path: str, encoding: str) -> Any:
    from hf_atr.data.caption_list import read_caption_list

    try:
        return read_caption_list(path, encoding=encoding)
    except (FileNotFoundError, ValueError) as error:  # CorpusFormatError, or an encoding Python does not know
        raise SystemExit(f"hf-atr index --captions: {error}") from error


__all__ = ["DEFAULT_SAVE_EVERY", "add_index_parser", "run_index"]

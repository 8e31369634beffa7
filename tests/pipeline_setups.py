"""What the retrieval pipeline's tests share: a saved tiny model, captions, a dataset and folders of audio as users
have them, and the warnings a block logs."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import torch
from datasets import Dataset
from tiny_models import SAMPLING_RATE, make_model, make_processor, random_waveforms

from hf_atr.data.audio import encode_wav
from hf_atr.pipelines.index import EmbeddingIndex

CAPTIONS = ["a dog barks loudly", "birds sing", "a siren wails", "a car passes quietly", "beep tone high"]


def save_model(directory, **config_kwargs):
    """A tiny model and its processor, saved in ``directory`` as ``save_pretrained`` writes them."""
    processor = make_processor()
    model = make_model(processor=processor, **config_kwargs)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return model, processor


@contextlib.contextmanager
def caplog_warnings() -> Iterator[list[str]]:
    """The warnings logged by hf_atr inside the block, as one string (the pipeline factory resets handlers)."""
    records: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("hf_atr")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        records[:] = ["\n".join(records)]


def clips_dataset(count=4):
    """A shared-schema dataset of ``count`` clips (WAV bytes), ids ``clip<i>``, two captions each."""
    waveforms = random_waveforms(count, seed=7)
    return Dataset.from_dict(
        {
            "audio_id": [f"clip{i}" for i in range(count)],
            "audio": [
                {"bytes": encode_wav(w, SAMPLING_RATE, subtype="FLOAT"), "path": None} for w in waveforms
            ],
            "captions": [[CAPTIONS[i % 5], CAPTIONS[(i + 1) % 5]] for i in range(count)],
        }
    )


def bad_folder(directory: Path) -> list[Path]:
    """Two good clips and the three kinds of unreadable file a real folder holds."""
    waveforms = random_waveforms(2, seed=11)
    (directory / "a.wav").write_bytes(encode_wav(waveforms[0], SAMPLING_RATE))
    (directory / "b.wav").write_bytes(encode_wav(waveforms[1], SAMPLING_RATE))
    (directory / "._a.wav").write_bytes((directory / "a.wav").read_bytes()[:200])
    (directory / "empty.wav").write_bytes(b"")
    (directory / "readme.wav").write_text("renamed text")
    return sorted(directory.iterdir())


def write_clips(directory: Path, count: int, seed: int = 2) -> list[str]:
    """``count`` one-second WAV files ``clip<i>.wav`` in ``directory``; their paths, sorted."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"clip{i}.wav" for i in range(count)]
    for path, waveform in zip(paths, random_waveforms(count, seed=seed)):
        path.write_bytes(encode_wav(waveform, SAMPLING_RATE))
    return [str(path) for path in paths]


def unit_vectors(count: int, dim: int = 16, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(count, dim, generator=generator), dim=-1)


def filled_index(vectors: torch.Tensor, **options) -> EmbeddingIndex:
    index = EmbeddingIndex(vectors.shape[1], **options)
    index.add(vectors, [f"item{i}" for i in range(len(vectors))])
    return index


def windowed_index(kind: str = "flat") -> tuple[EmbeddingIndex, torch.Tensor, list[str]]:
    """40 files of 1 to 20 windows each (ids repeat), with spans."""
    counts = [1 + (7 * file) % 20 for file in range(40)]
    ids = [f"file{file}.wav" for file, count in enumerate(counts) for _ in range(count)]
    spans = [(0.5 * window, 0.5 * window + 1.0) for count in counts for window in range(count)]
    vectors = unit_vectors(len(ids), seed=4)
    index = EmbeddingIndex(16, kind=kind, root="/data/field recordings")
    index.add(vectors, ids, spans=spans)
    return index, vectors, ids

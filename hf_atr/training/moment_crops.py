"""Training on moment annotations: window crops of long recordings, inside and outside the moments.

A moment dataset (:func:`~hf_atr.data.moments.load_moments`: one row per query, ``windows`` in seconds of the
recording ``audio``) becomes, every epoch, one item per query:

- a **positive crop**: a window of :attr:`MomentCropDataset.crop_seconds` (or the whole moment when it is shorter)
  drawn uniformly inside one of the query's annotated windows, paired with the query as its caption;
- a **negative crop** of the same length drawn uniformly outside every annotated window of the recording (all of
  its queries' windows, so that it holds none of the recording's annotated events): an in-recording hard
  negative, the same background without the event. It enters the batch as an unpaired audio row
  (:data:`~hf_atr.objectives.batch.NEGATIVE_AUDIO`), which an objective that declares ``accepts_negative_audio``
  (``contrastive``) scores as a negative of every caption only; a recording without such room gives none.

Crops lie inside the recording: each window is clipped to ``[0, duration]``
(:func:`~hf_atr.data.moments.windows_inside`; released files have windows running past their recording), a window
left with no length there is skipped, and a query left with no window is left out, all counted in one warning.
The caption is the query as the model encodes it (:func:`~hf_atr.data.moments.query_text_for_model`).

Each crop is its own clip for the objectives: its ``audio_id`` is ``<recording>@<start>-<end>``
(:func:`crop_id`), so two crops of one recording are each other's negatives unless they are the same span.
Positions are drawn from ``(seed, epoch, qid)``: a resumed run draws the crops an uninterrupted one would, and
each epoch shows other windows of the same moments. The crop length defaults to the feature extractor's window
(:func:`~hf_atr.windowing.extractor_window`), the window moment scoring slides over a recording.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import soundfile
import torch

from ..data.audio import read_audio_span
from ..data.audio_arrays import AudioDecodeError
from ..data.moments import MOMENT_COLUMNS, is_moment_dataset, query_text_for_model, windows_inside
from ..data.schema import ENGLISH, check_caption
from ..lazy import get_logger
from ..objectives.batch import NEGATIVE_AUDIO
from ..processing_atr import AtrProcessor
from ..windowing import extractor_window
from .collator import EPOCH, AtrDataCollator, pair_batch
from .waveform_collator import item_seed

logger = get_logger(__name__)

DEFAULT_CROP_SECONDS = 10.0
"""The crop length for a feature extractor without a window of its own."""
NEGATIVE_CROP = "negative_crop"
"""Item entry of :class:`MomentCropDataset`: the negative crop's row (``audio``, ``audio_id``, ``epoch``) or None."""
MOMENTS_VIEW = "pairs_from_moments"
"""The training view of moment data (:mod:`hf_atr.training.objective_setup`), chosen by the data, not the objective."""
_LISTED_QUERIES = 5


def default_crop_seconds(processor: AtrProcessor) -> float:
    """The feature extractor's window in seconds, or :data:`DEFAULT_CROP_SECONDS` for one without a window."""
    window = extractor_window(processor.feature_extractor)
    return float(window.seconds) if window.seconds is not None else DEFAULT_CROP_SECONDS


def crop_id(recording_id: str, start: float, end: float) -> str:
    """The ``audio_id`` of the crop ``[start, end]`` (seconds) of ``recording_id``: ``<recording>@<start>-<end>``
    at millisecond resolution."""
    return f"{recording_id}@{start:.3f}-{end:.3f}"


def crop_inside(window: Sequence[float], length: float, rng: np.random.Generator) -> tuple[float, float]:
    """A span of ``min(length, end - start)`` seconds drawn uniformly inside ``window = [start, end]``."""
    start, end = float(window[0]), float(window[1])
    span = min(length, end - start)
    offset = float(rng.uniform(start, end - span)) if end - start > span else start
    return offset, offset + span


def free_intervals(windows: Sequence[Sequence[float]], duration: float) -> list[tuple[float, float]]:
    """The parts of ``[0, duration]`` that no window of ``windows`` covers, in order."""
    free, cursor = [], 0.0
    for start, end in sorted((float(start), float(end)) for start, end in windows):
        if start > cursor:
            free.append((cursor, min(start, duration)))
        cursor = max(cursor, end)
    if cursor < duration:
        free.append((cursor, float(duration)))
    return [(start, end) for start, end in free if end > start]


def crop_outside(
    windows: Sequence[Sequence[float]], duration: float, length: float, rng: np.random.Generator
) -> tuple[float, float] | None:
    """A span of ``length`` seconds inside ``[0, duration]`` that overlaps no window, its start drawn uniformly
    over every admissible start; ``None`` when no gap between the windows is that long."""
    starts = [
        (start, end - length) for start, end in free_intervals(windows, duration) if end - start >= length
    ]
    if not starts:
        return None
    widths = np.array([last - first for first, last in starts])
    if widths.sum() == 0:  # only gaps of exactly the crop's length: pick one of them
        first, _ = starts[int(rng.integers(len(starts)))]
        return first, first + length
    position = float(rng.uniform(0.0, widths.sum()))
    index = min(int(np.searchsorted(np.cumsum(widths), position, side="right")), len(starts) - 1)
    first = starts[index][0] + position - float(widths[:index].sum())
    first = min(first, starts[index][1])
    return first, first + length


def read_span(audio: Any, start: float, end: float, source: str) -> dict[str, Any]:
    """The samples of a recording's ``audio`` value (the shared schema's ``{"bytes", "path"}``) from ``start`` to
    ``end`` seconds, as ``{"array": (frames, channels), "sampling_rate"}`` (down-mixed and resampled by the
    collator as any clip)."""
    if audio.get("bytes") is not None:
        with soundfile.SoundFile(io.BytesIO(audio["bytes"])) as file:
            rate = file.samplerate
            file.seek(min(round(start * rate), file.frames))
            frames = file.read(max(round((end - start) * rate), 1), dtype="float32", always_2d=True)
    else:
        frames, rate = read_audio_span(audio["path"], start, end)
    if len(frames) == 0:
        raise AudioDecodeError(source, f"the span {start:g}-{end:g} s holds no samples.")
    return {"array": frames, "sampling_rate": rate}


class MomentCropDataset(torch.utils.data.Dataset):
    """One item per query per epoch: a positive crop inside its moment and a negative crop outside the recording's
    moments (module docstring).

    Items are ``{"audio": {"array", "sampling_rate"}, "audio_id", "captions": [query], "caption_index": 0,
    "caption_language": "eng", "epoch", "qid", "span": (start, end), "negative_crop": {"audio", "audio_id",
    "epoch", "span"} | None}``, one per query with a window inside its recording (:attr:`rows`: their rows in
    ``moments``).

    Args:
        moments: a moment dataset (:data:`MOMENT_COLUMNS`).
        crop_seconds: the crop length (> 0).
        seed: seeds the crop positions with the epoch and the ``qid``.
        negatives: draw the negative crops (``False``: ``negative_crop`` is always None).

    Raises:
        ValueError: a dataset without the moment columns, a crop length that is not positive, or no window inside
            its recording.
    """

    def __init__(self, moments: Any, crop_seconds: float, *, seed: int = 0, negatives: bool = True) -> None:
        if not is_moment_dataset(moments):
            raise ValueError(
                f"Moment training needs the columns {list(MOMENT_COLUMNS)} (hf_atr.load_moments); the dataset has "
                f"{getattr(moments, 'column_names', None)}."
            )
        if not crop_seconds > 0:
            raise ValueError(f"crop_seconds must be positive, got {crop_seconds!r}.")
        self.clips = moments
        self.crop_seconds = float(crop_seconds)
        self.seed = int(seed)
        self.negatives = negatives
        columns = moments.select_columns(["recording_id", "duration", "qid", "query", "windows"]).to_dict()
        inside = [
            windows_inside(windows, duration)
            for windows, duration in zip(columns["windows"], columns["duration"])
        ]
        self.rows = [row for row, windows in enumerate(inside) if windows]
        """The rows of ``moments`` the items are, in order: the queries with a window inside their recording."""
        self.recording_ids = [columns["recording_id"][row] for row in self.rows]
        self.durations = [columns["duration"][row] for row in self.rows]
        self.qids = [columns["qid"][row] for row in self.rows]
        self.queries = [query_text_for_model(columns["query"][row]) for row in self.rows]
        self.windows = [inside[row] for row in self.rows]
        self.recording_windows: dict[str, list[list[float]]] = {}
        for recording, windows in zip(columns["recording_id"], inside):
            self.recording_windows.setdefault(recording, []).extend(windows)
        _report_clipped_windows(columns, inside)
        if not self.rows:
            raise ValueError(
                f"None of the {len(inside)} moment queries has a window inside its recording [0, duration], so "
                "moment training has no crop to draw."
            )
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Draw this epoch's crops."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.qids)

    def spans(self, index: int) -> tuple[tuple[float, float], tuple[float, float] | None]:
        """The positive and negative spans (seconds) of item ``index`` this epoch."""
        rng = np.random.default_rng(item_seed(self.seed, self.epoch, "moment crop", self.qids[index]))
        windows = self.windows[index]
        positive = crop_inside(windows[int(rng.integers(len(windows)))], self.crop_seconds, rng)
        if not self.negatives:
            return positive, None
        recording = self.recording_ids[index]
        length = positive[1] - positive[0]
        return positive, crop_outside(self.recording_windows[recording], self.durations[index], length, rng)

    def __getitem__(self, index: int) -> dict[str, Any]:
        positive, negative = self.spans(index)
        recording = self.recording_ids[index]
        audio = self.clips[self.rows[index]]["audio"]
        source = f"recording {recording!r} (qid {self.qids[index]!r})"
        item = {
            "audio": read_span(audio, *positive, source),
            "audio_id": crop_id(recording, *positive),
            "captions": [self.queries[index]],
            "caption_index": 0,
            "caption_language": ENGLISH,
            EPOCH: self.epoch,
            "qid": self.qids[index],
            "span": positive,
            NEGATIVE_CROP: None,
        }
        if negative is not None:
            item[NEGATIVE_CROP] = {
                "audio": read_span(audio, *negative, source),
                "audio_id": crop_id(recording, *negative),
                EPOCH: self.epoch,
                "span": negative,
            }
        return item


def _report_clipped_windows(columns: dict[str, list[Any]], inside: list[list[list[float]]]) -> None:
    """One warning counting the windows that run outside their recording (clipped to it, or skipped when no length
    is left) and the queries left out, with no window left."""
    outside = sum(
        start < 0 or end > duration
        for windows, duration in zip(columns["windows"], columns["duration"])
        for start, end in windows
    )
    if not outside:
        return
    skipped = sum(len(windows) - len(kept) for windows, kept in zip(columns["windows"], inside))
    left_out = [qid for qid, kept in zip(columns["qid"], inside) if not kept]
    message = (
        f"Moment training: {outside} window(s) run outside their recording [0, duration]: {outside - skipped} "
        f"clipped to it, {skipped} skipped (no length inside)"
    )
    if left_out:
        more = " ..." if len(left_out) > _LISTED_QUERIES else ""
        message += f"; {len(left_out)} query(ies) with no window left are left out: {left_out[:_LISTED_QUERIES]}{more}"
    logger.warning(message + ".")


@dataclass
class MomentCropCollator:
    """Items of :class:`MomentCropDataset` -> one batch: the positive crops paired with their queries, then the
    negative crops as unpaired audio rows.

    The audio of every crop goes through ``clips``'s ``audio_inputs`` (an :class:`AtrDataCollator`, features
    computed here; or a :class:`~hf_atr.training.WaveformCollator`, waveforms for features on the device), positive
    crops first. Returns the model inputs and the objective's metadata: ``audio_ids`` of every audio row,
    ``caption_indices`` and ``languages`` of the caption rows, and, when some item has a negative crop,
    ``negative_audio: (n_audio,)`` bool (:data:`~hf_atr.objectives.batch.NEGATIVE_AUDIO`).
    """

    clips: AtrDataCollator

    @property
    def features(self) -> Any:
        """The batched feature twin of a waveform collator (read by the trainer), else None."""
        return getattr(self.clips, "features", None)

    @property
    def waveforms(self) -> Any:
        """The waveform collator that prepares the audio, when features are computed on the device."""
        return self.clips if self.features is not None else None

    def __call__(self, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if not items:
            raise ValueError("MomentCropCollator got an empty batch.")
        negatives = [item[NEGATIVE_CROP] for item in items if item.get(NEGATIVE_CROP) is not None]
        audio_ids = [item["audio_id"] for item in items] + [negative["audio_id"] for negative in negatives]
        captions = [check_caption(item["captions"][0], 0, item["audio_id"], ENGLISH) for item in items]
        batch = pair_batch(
            self.clips.processor,
            self.clips.audio_inputs([*items, *negatives], audio_ids),
            audio_ids,
            captions,
            [0] * len(items),
            [ENGLISH] * len(items),
            self.clips.max_length,
            self.clips.text_length_buckets,
        )
        if negatives:
            batch[NEGATIVE_AUDIO] = torch.arange(len(audio_ids)) >= len(items)
        return batch


__all__ = [
    "DEFAULT_CROP_SECONDS",
    "MOMENTS_VIEW",
    "MomentCropCollator",
    "MomentCropDataset",
    "crop_id",
    "crop_inside",
    "crop_outside",
    "default_crop_seconds",
    "free_intervals",
]

"""``pipeline("audio-text-retrieval")``: index a corpus once, then search it with text or audio queries.

Example::

    import hf_atr  # registers the task
    from transformers import pipeline

    pipe = pipeline("audio-text-retrieval", model="runs/atr-clotho")
    pipe.index(clips_dataset)                 # audio clips (and their captions) -> faiss indexes
    pipe("a dog barks", top_k=5)              # [{"id": "clip_17", "score": 0.61, "start": 20.0, "end": 30.0}, ...]
    pipe("dog.wav", top_k=5)                  # [{"id": "clip_17#0", "score": 0.61, "caption": "..."}, ...]
    pipe(audio="dog.wav", top_k=5)            # query by example: the clips that sound most alike
    pipe.classify("dog.wav", labels=["dog", "rain", "siren"])   # [{"label": "dog", "score": 0.92}, ...]
    pipe.save_index()                         # next to the model; loaded again by the next pipeline()

Audio is read as transformers' audio pipelines read it, the same wherever it is accepted (queries, query by
example, :meth:`~AudioTextRetrievalPipeline.classify`, :meth:`~AudioTextRetrievalPipeline.index`;
:func:`hf_atr.data.audio.audio_clips`): a file path, ``{"raw" | "array": samples, "sampling_rate": rate}``, or
an array; one array is one clip (a 2-D array is one multi-channel clip in either orientation, mixed down as a
file is), a batch is a list, and an array without a rate is taken at the processor's rate, said once in the log.

Long recordings are indexed window by window (:mod:`hf_atr.windowing`) and searched whole: a hit is a file
with its best-matching span. Files that cannot be decoded are skipped and listed (``pipe.skipped``,
``skipped.tsv`` beside the saved index) unless ``strict=True``. Under several processes (``accelerate
launch``, ``torchrun``) :meth:`AudioTextRetrievalPipeline.index` encodes a share of the items on each
process and every process ends with the same index as one process would build.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from tqdm.auto import tqdm
from transformers import AutoModel, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.utils import logging

from hf_atr import hub
from hf_atr.data.audio import (
    AudioClips,
    AudioDecodeError,
    audio_clips,
    decode_audio,
    is_appledouble,
    is_one_clip,
    looks_like_audio_path,
)
from hf_atr.encoding import (
    AudioEmbeddings,
    SkippedAudio,
    encode_audio,
    encode_audio_clips,
    encode_audio_windows,
    encode_labels,
    encode_text,
    label_prompts,
)
from hf_atr.pipelines.index import EmbeddingIndex, metric_for_scoring, model_fingerprint, replaced_atomically
from hf_atr.processing_atr import AUDIO_INPUT_NAMES, AtrProcessor
from hf_atr.training.distributed import gather_shards, rank_and_world_size, wait_for_all
from hf_atr.windowing import Windowing, pool_window_embeddings, window_bounds

logger = logging.get_logger(__name__)

TASK = "audio-text-retrieval"
INDEX_DIRNAME = "retrieval_index"
"""Sub-folder of a model directory where :meth:`AudioTextRetrievalPipeline.save_index` writes by default."""
AUDIO_INDEX_NAME = "audio_index"
TEXT_INDEX_NAME = "text_index"
INDEX_NAMES = (AUDIO_INDEX_NAME, TEXT_INDEX_NAME)
SKIPPED_FILENAME = "skipped.tsv"
"""Written beside a saved index: one row per file left out (``path``, ``reason``), tab-separated."""
APPLEDOUBLE_REASON = "AppleDouble"
"""The reason recorded for macOS ``._*`` files, which are skipped even with ``strict=True`` (they hold no audio)."""
CLIPS_PER_STEP = 8
"""Batches of clips each process encodes between two merges of the index (under several processes the
merge is a collective; alone it bounds what an interrupted call loses)."""


class MissingIndexError(ValueError):
    """A query for entries the pipeline holds none of (no index of them, or an empty one).

    Attributes:
        query_modality: ``"text"`` or ``"audio"``, what the query is.
        missing: :data:`AUDIO_INDEX_NAME` (a text query or a query by example searches audio clips) or
            :data:`TEXT_INDEX_NAME` (an audio query searches captions).

    The message gives the Python calls that build or load the index; ``hf-atr search`` words its own.
    """

    def __init__(self, query_modality: str, missing: str) -> None:
        self.query_modality = query_modality
        self.missing = missing
        entries = "audio clips" if missing == AUDIO_INDEX_NAME else "captions"
        article = "An" if query_modality == "audio" else "A"
        super().__init__(
            f"{article} {query_modality} query searches {entries}, and this pipeline holds none: call "
            f"`pipe.index(...)` with {entries} (or a Dataset), or `pipe.load_index(dir)`."
        )


@dataclass(frozen=True)
class _AudioExample:
    """A query by example: audio whose nearest clips in the audio index are wanted (``pipe(audio=...)``)."""

    audio: Any


class AudioTextRetrievalPipeline(Pipeline):
    """Text→audio and audio→text search over an indexed corpus, query by example, and zero-shot audio
    classification.

    Built by ``pipeline("audio-text-retrieval", model=dir)`` after ``import hf_atr`` (the directory holds
    an :class:`~hf_atr.AtrDualEncoderModel` and its :class:`~hf_atr.AtrProcessor`).

    - :meth:`index` encodes a corpus once: audio clips (arrays, paths, or a ``datasets.Dataset`` of the
      shared schema, raw or with precomputed features) into the audio index, a clip longer than the
      extractor's window as one entry per window with its time span (or, with ``pool=True``, one pooled
      entry per clip); captions (a list of strings, or a dataset's ``captions`` column) into the caption
      index.
    - ``pipe(query, top_k=5)``: a string is a text query unless it names an audio file (an existing file,
      or a name ending in an audio extension: a missing ``"dog.wav"`` is an error, not a caption); it returns
      the best **clips** ``[{"id", "score", "start", "end", "path"}]``, each at its best-matching window
      (``start`` / ``end`` in seconds when the index has spans, ``path`` when it knows its root). Audio
      (path, array, ``{"raw" | "array", "sampling_rate"}``; ``sampling_rate=`` for an array given bare)
      returns the best captions ``[{"id", "score", "caption"}]``; ``pipe(audio=clip)`` returns the clips that sound most alike (query by example). A long
      audio query is embedded window by window and pooled (``windowing``). Scores are the model's unscaled
      similarity: cosine, or the negative Euclidean/Mahalanobis distance.
    - :meth:`classify` does zero-shot classification with caption templates.
    - :meth:`save_index` / :meth:`load_index` persist the indexes (safetensors + JSON) and the list of
      skipped files; an index saved in ``<model dir>/retrieval_index`` (or in the model's Hub repository)
      is loaded automatically, with a log line saying so; :meth:`push_to_hub` uploads it with the model.

    Args:
        index_dir: a directory written by :meth:`save_index` to load at construction.
        index_kind: ``"flat"`` (exact, default), ``"ivf"`` or ``"hnsw"`` for indexes built by :meth:`index`.
        index_options: further :class:`~hf_atr.pipelines.index.EmbeddingIndex` options (``nprobe``, ...).
        windowing: window length, hop and pooling for long clips (default
            :class:`~hf_atr.windowing.Windowing`: the extractor's window, 50 % overlap, mean pooling).
    """

    _load_processor = True
    _load_tokenizer = True
    _load_feature_extractor = True
    _load_image_processor = False

    def __init__(
        self,
        *args: Any,
        index_dir: str | os.PathLike | None = None,
        index_kind: str = "flat",
        index_options: dict[str, Any] | None = None,
        windowing: Windowing | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if self.processor is None:
            if self.tokenizer is None or self.feature_extractor is None:
                raise ValueError(
                    "The audio-text-retrieval pipeline needs the model's AtrProcessor (or its tokenizer and "
                    "feature extractor); save it next to the model with `processor.save_pretrained(dir)`."
                )
            self.processor = AtrProcessor(self.feature_extractor, self.tokenizer)
        if not isinstance(self.processor, AtrProcessor):
            raise TypeError(f"Expected an AtrProcessor, got {type(self.processor).__name__}.")
        self.index_kind = index_kind
        self.index_options = dict(index_options or {})
        self.windowing = windowing or Windowing()
        self.windowing.samples(
            self.processor.feature_extractor
        )  # a window the extractor cannot read fails here
        self.audio_index: EmbeddingIndex | None = None
        self.text_index: EmbeddingIndex | None = None
        self.skipped: list[SkippedAudio] = []
        """Audio left out of the audio index because it cannot be decoded (``name``: its path or row)."""
        self._said_rate_assumed = False
        if index_dir is None:
            index_dir = self._default_index_dir() or self._hub_index_dir()
            if index_dir is None or not _holds_index(index_dir):
                return
            self.load_index(index_dir)
            logger.warning(
                f"Loaded the retrieval index saved with the model in {index_dir}: {self._contents()}."
            )
            return
        self.load_index(index_dir)

    def _contents(self) -> str:
        parts = []
        if self.audio_index is not None:
            parts.append(f"{len(set(self.audio_index.ids))} audio clip(s) in {len(self.audio_index)} entries")
        if self.text_index is not None:
            parts.append(f"{len(self.text_index)} caption(s)")
        return ", ".join(parts)

    # Queries -----------------------------------------------------------------------------------------

    def __call__(self, inputs: Any = None, *args: Any, audio: Any = None, **kwargs: Any) -> Any:
        """Search: ``pipe(query)`` (text for clips, audio for captions) or ``pipe(audio=clip)`` (audio for
        clips); a list of queries gives a list of results."""
        if audio is not None:
            if inputs is not None:
                raise ValueError("Give either a query or `audio=` (query by example), not both.")
            if isinstance(audio, (list, tuple)):
                inputs = [_AudioExample(clip) for clip in audio]
            else:
                inputs = _AudioExample(audio)
        elif inputs is None:
            raise ValueError(
                "Give a query: pipe('a dog barks') for clips, pipe('clip.wav') for captions, or "
                "pipe(audio='clip.wav') for clips that sound alike."
            )
        return super().__call__(inputs, *args, **kwargs)

    def _sanitize_parameters(self, top_k: int | None = None, sampling_rate: int | None = None):
        preprocess_params = {} if sampling_rate is None else {"sampling_rate": sampling_rate}
        postprocess_params = {} if top_k is None else {"top_k": top_k}
        return preprocess_params, {}, postprocess_params

    def preprocess(self, query: Any, sampling_rate: int | None = None) -> dict[str, Any]:
        if isinstance(query, _AudioExample):
            return {"target": AUDIO_INDEX_NAME, **self._audio_query_inputs(query.audio, sampling_rate)}
        if isinstance(query, str) and not looks_like_audio_path(query):
            if not query.strip():
                raise ValueError("The text query is empty.")
            text_inputs = self.processor(text=[query], return_tensors="pt")
            return {"modality": "text", "target": AUDIO_INDEX_NAME, **text_inputs}
        return {"target": TEXT_INDEX_NAME, **self._audio_query_inputs(query, sampling_rate)}

    def _audio_query_inputs(self, audio: Any, sampling_rate: int | None) -> dict[str, Any]:
        """One audio query's model inputs: one row per window when it is long (pooled by ``_forward``)."""
        if isinstance(audio, (str, os.PathLike)) and not os.path.isfile(audio):
            raise FileNotFoundError(
                f"The query {str(audio)!r} looks like an audio file path, but there is no such file. Give "
                "an existing audio file, or a caption without a file extension."
            )
        given = self._audio_clips(audio, sampling_rate, "the audio query")
        if not given.single:
            raise ValueError(
                f"A query is one clip, got a {type(audio).__name__} of {len(given.clips)}: pass a list of "
                "queries at the top level, pipe([clip_1, clip_2]) or pipe(audio=[clip_1, clip_2])."
            )
        name = given.names[0]
        waveform = decode_audio(given.clips[0], self.processor.sampling_rate, source=name)
        extractor = self.processor.feature_extractor
        window_and_hop = self.windowing.samples(extractor) if self.windowing.splits_clips(extractor) else None
        windows = [
            waveform[start:stop]
            for start, stop in window_bounds(len(waveform), *(window_and_hop or (None, None)))
        ]
        inputs = self.processor(audio=windows, audio_names=[name] * len(windows), return_tensors="pt")
        return {"modality": "audio", **inputs}

    def _audio_clips(self, audio: Any, sampling_rate: int | None, name: str) -> AudioClips:
        """``audio`` read as users hand it over (:func:`~hf_atr.data.audio.audio_clips`); the first array of this
        pipeline given without a rate is named in the log, once."""
        given = audio_clips(
            audio, sampling_rate=sampling_rate, default_rate=self.processor.sampling_rate, name=name
        )
        if given.rate_assumed and not self._said_rate_assumed:
            self._said_rate_assumed = True
            rate = self.processor.sampling_rate
            logger.warning(
                f"An audio array was given without its sampling rate: it is taken at {rate} Hz, the processor's "
                f"rate (said once per pipeline). If it was recorded at another rate, give the rate: "
                f"{{'raw': array, 'sampling_rate': rate}}, or sampling_rate=rate."
            )
        return given

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        modality, target = model_inputs.pop("modality"), model_inputs.pop("target")
        if modality == "text":
            embeds = self.model.get_text_features(**model_inputs)
        else:
            window_embeds = self.model.get_audio_features(**model_inputs)
            embeds = pool_window_embeddings(window_embeds, self.windowing.pooling)[None]
        return {"modality": modality, "target": target, "embeds": embeds}

    def postprocess(self, model_outputs: dict[str, Any], top_k: int = 5) -> list[dict[str, Any]]:
        target = model_outputs["target"]
        gallery = self.audio_index if target == AUDIO_INDEX_NAME else self.text_index
        if gallery is None or len(gallery) == 0:
            raise MissingIndexError(model_outputs["modality"], target)
        scores, positions = gallery.search_files(self._for_index(model_outputs["embeds"]), top_k)
        return [
            self._hit(gallery, int(position), float(score))
            for score, position in zip(scores[0], positions[0])
            if position >= 0
        ]

    @staticmethod
    def _hit(gallery: EmbeddingIndex, position: int, score: float) -> dict[str, Any]:
        hit: dict[str, Any] = {"id": gallery.ids[position], "score": score}
        if gallery.spans is not None:
            hit["start"], hit["end"] = gallery.spans[position]
        if gallery.root is not None:
            hit["path"] = gallery.path_of(gallery.ids[position])
        if gallery.captions is not None:
            hit["caption"] = gallery.captions[position]
        return hit

    def _for_index(self, embeds: torch.Tensor) -> torch.Tensor:
        """Embeddings in the index's geometry: ``M^{1/2} x`` for Mahalanobis scoring, unchanged otherwise."""
        return (
            self.model.scoring_head.transform(embeds.to(self.model.scoring_head.logit_scale.device))
            .float()
            .cpu()
        )

    # Indexing ----------------------------------------------------------------------------------------

    def index(
        self,
        corpus: Any,
        *,
        ids: Sequence[str] | None = None,
        batch_size: int = 32,
        index_captions: bool = True,
        show_progress: bool = True,
        pool: bool = False,
        strict: bool = False,
        append: bool = False,
        root: str | os.PathLike | None = None,
        sampling_rate: int | None = None,
    ) -> EmbeddingIndex:
        """Encode ``corpus`` once (batched, with a progress bar) into the matching index.

        Args:
            corpus: a list of captions (strings) → caption index; a list of audio clips (file paths, arrays,
                ``{"raw" | "array", "sampling_rate"}`` dicts; each array one clip) → audio index; a
                ``datasets.Dataset`` with ``audio`` or precomputed features → audio index with ids from
                its ``audio_id`` column, and, when it has ``captions`` and ``index_captions``, a caption
                index whose ids are ``"<audio_id>#<slot>"``. A list of strings is audio when any of them
                names an audio file (exists, or ends in an audio extension).
            ids: one id per item (lists only); default: for files their path relative to ``root`` (as
                given when there is no ``root``), else ``"0"``, ``"1"``, ...
            batch_size: windows (or clips) per forward pass; captions go four times as many.
            pool: store one entry per clip (its windows pooled by ``windowing.pooling``, spanning the whole
                clip) instead of one entry per window with its span.
            strict: stop at the first item that cannot be decoded (``AudioDecodeError`` naming it; what was
                indexed before it stays in the index). By default such items are skipped, listed in
                :attr:`skipped` (and in ``skipped.tsv`` by :meth:`save_index`) and summed up in a warning.
                macOS ``._*`` AppleDouble files are skipped either way, with reason ``AppleDouble``.
            append: add to the current index instead of replacing it; an id already in it is an error.
            root: the directory file ids are relative to, recorded in the index so that hits carry a
                ``path`` that resolves from anywhere (default: the current directory when the ids are the
                file paths; with ``ids`` of your own and no ``root``, hits carry no ``path``).
            sampling_rate: the rate of the arrays in a list given bare (default: the processor's, said once in
                the log).

        Raises:
            ValueError: an empty corpus, a single clip instead of a list, two items with one id (naming both),
                or an id already indexed.
            AudioDecodeError: an array that is not one clip (:func:`~hf_atr.data.audio.audio_clips`), whatever
                ``strict`` says: it is refused before anything is encoded.

        Returns:
            The audio index, or the caption index for a list of captions. Under several processes
            (``torch.distributed`` initialised, e.g. by ``accelerate launch``) each process encodes a share
            of the items and every process returns the whole index, the one a single process builds.
        """
        if is_one_clip(corpus):
            raise ValueError(
                f"index() takes a list of clips, got one {type(corpus).__name__}: one array (or path, or dict) is "
                "one clip. Pass [clip] to index one clip, and a stacked batch of clips as list(batch)."
            )
        if not hasattr(corpus, "__len__") or len(corpus) == 0:
            raise ValueError(
                "index() needs a non-empty list of captions or audio clips, or a datasets.Dataset."
            )
        if ids is not None and len(ids) != len(corpus):
            raise ValueError(f"Got {len(corpus)} items but {len(ids)} ids.")
        if hasattr(corpus, "column_names"):
            if ids is not None:
                raise ValueError("A Dataset brings its ids in its `audio_id` column; do not pass `ids`.")
            return self._index_dataset(
                corpus, batch_size, index_captions, show_progress, pool, strict, append
            )
        items = list(corpus)
        if all(isinstance(item, str) for item in items) and not any(map(looks_like_audio_path, items)):
            caption_ids = [str(i) for i in range(len(items))] if ids is None else [str(item) for item in ids]
            return self._index_captions(items, caption_ids, 4 * batch_size, show_progress, append)
        is_path = [isinstance(item, (str, os.PathLike)) for item in items]
        root_dir = (
            Path(root if root is not None else os.getcwd()).expanduser().resolve()
            if any(is_path) and (root is not None or ids is None)
            else None  # ids of the caller's own naming are no paths under the current directory
        )
        if ids is None:
            ids = [
                (relative_id(item, root_dir) if root is not None else str(item)) if path else str(position)
                for position, (item, path) in enumerate(zip(items, is_path))
            ]
        sources = [
            str(item) if path else f"item {position}"
            for position, (item, path) in enumerate(zip(items, is_path))
        ]
        given = self._audio_clips(items, sampling_rate, "the corpus")
        rows = [
            {"audio": clip, "audio_id": source} for clip, source in zip(given.clips, sources)
        ]  # names in messages
        self._index_audio(
            rows,
            [str(item_id) for item_id in ids],
            sources,
            _IndexingOptions(batch_size, show_progress, pool, strict, append),
            None if root_dir is None else str(root_dir),
        )
        return self.audio_index

    def _index_dataset(
        self,
        dataset: Any,
        batch_size: int,
        index_captions: bool,
        show_progress: bool,
        pool: bool,
        strict: bool,
        append: bool,
    ) -> EmbeddingIndex:
        if "audio_id" not in dataset.column_names:
            raise ValueError(f"The dataset needs an `audio_id` column (columns: {dataset.column_names}).")
        audio_ids = [str(audio_id) for audio_id in dataset["audio_id"]]
        sources = [f"row {row} ({audio_id})" for row, audio_id in enumerate(audio_ids)]
        paths = _dataset_audio_paths(dataset)
        if paths is not None:
            sources = [
                f"row {row} ({path})" if path else source
                for row, (source, path) in enumerate(zip(sources, paths))
            ]
        options = _IndexingOptions(batch_size, show_progress, pool, strict, append)
        indexed = set(self._index_audio(dataset, audio_ids, sources, options, None))
        if index_captions and "captions" in dataset.column_names:
            caption_ids, captions = [], []
            for row, (audio_id, clip_captions) in enumerate(zip(audio_ids, dataset["captions"])):
                if row in indexed:
                    for slot, caption in enumerate(clip_captions or []):
                        caption_ids.append(f"{audio_id}#{slot}")
                        captions.append(caption)
            self._index_captions(captions, caption_ids, 4 * batch_size, show_progress, append)
        return self.audio_index

    def _index_audio(
        self,
        rows: Any,
        ids: Sequence[str],
        sources: Sequence[str],
        options: _IndexingOptions,
        root: str | None,
    ) -> list[int]:
        """Add the audio of ``rows`` to the audio index step by step; returns the positions indexed."""
        if options.append and self.audio_index is not None:
            index = self.audio_index
            if root is not None and index.root is not None and Path(index.root) != Path(root):
                raise ValueError(
                    f"The audio index resolves its ids from {index.root}, not {root}: pass root={index.root!r} "
                    "(ids relative to it) or build a new index."
                )
            index.root = index.root or root
        else:
            index = self._new_index(root=root)
            self.skipped = []
        _check_unique_ids(ids, sources, index)
        self.audio_index = index  # filled step by step: an interrupted call keeps what was encoded
        appledouble = {position for position, source in enumerate(sources) if is_appledouble(source)}
        skipped = [
            SkippedAudio(position, sources[position], APPLEDOUBLE_REASON) for position in sorted(appledouble)
        ]
        windowing = self.windowing if _holds_waveforms(rows) else None
        indexed: list[int] = []

        def encode(positions: list[int]) -> tuple[torch.Tensor, dict[str, Any]]:
            part = (
                rows.select(positions)
                if hasattr(rows, "select")
                else [rows[position] for position in positions]
            )
            try:
                encoded = self._encode_audio_entries(part, windowing, options)
            except AudioDecodeError as error:  # strict: every process stops at the same step
                return torch.zeros(0, self.model.config.projection_dim), {"error": (error.name, error.reason)}
            spans = (
                None if encoded.starts is None else list(zip(encoded.starts.tolist(), encoded.ends.tolist()))
            )
            return encoded.embeddings, {
                "positions": [positions[clip] for clip in encoded.clip_indices.tolist()],
                "spans": spans,
                "skipped": [(positions[item.index], item.reason) for item in encoded.skipped],
            }

        todo = [position for position in range(len(ids)) if position not in appledouble]
        for embeddings, payloads in self._encode_shared(todo, options, "Indexing audio", encode):
            errors = [payload["error"] for payload in payloads if "error" in payload]
            if errors:
                raise AudioDecodeError(*errors[0])
            positions = [position for payload in payloads for position in payload["positions"]]
            spans = (
                [span for payload in payloads for span in payload["spans"] or []]
                if payloads[0]["spans"] is not None
                else None
            )
            if positions:
                index.add(self._for_index(embeddings), [ids[position] for position in positions], spans=spans)
            indexed.extend(dict.fromkeys(positions))
            skipped.extend(
                SkippedAudio(position, sources[position], reason)
                for payload in payloads
                for position, reason in payload["skipped"]
            )
        settled = {sources[position] for position in indexed} | {item.name for item in skipped}
        self.skipped = [item for item in self.skipped if item.name not in settled] + sorted(
            skipped, key=lambda item: item.index
        )
        if skipped and rank_and_world_size()[0] == 0:  # every process holds the merged list: one reports it
            listed = "; ".join(f"{item.name} ({item.reason})" for item in skipped[:5])
            more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
            logger.warning(
                f"Skipped {len(skipped)} of {len(ids)} audio item(s) that cannot be decoded: {listed}{more}. "
                f"They are listed in `pipe.skipped`; `save_index` writes them to {SKIPPED_FILENAME}."
            )
        return indexed

    def _encode_audio_entries(
        self, part: Any, windowing: Windowing | None, options: _IndexingOptions
    ) -> AudioEmbeddings:
        """The index entries of some clips: one per window (with spans), or one pooled entry per clip."""
        common = {"batch_size": options.batch_size, "strict": options.strict}
        if windowing is not None and not options.pool:
            return encode_audio_windows(self.model, self.processor, part, windowing=windowing, **common)
        return encode_audio_clips(self.model, self.processor, part, windowing=windowing, **common)

    def _index_captions(
        self, captions: Sequence[str], ids: Sequence[str], batch_size: int, show_progress: bool, append: bool
    ) -> EmbeddingIndex:
        index = self.text_index if append and self.text_index is not None else self._new_index()
        _check_unique_ids(ids, [f"caption {caption!r}" for caption in captions], index)
        self.text_index = index

        def encode(positions: list[int]) -> tuple[torch.Tensor, dict[str, Any]]:
            texts = [captions[position] for position in positions]
            embeds = (
                encode_text(self.model, self.processor, texts, batch_size=batch_size)
                if texts
                else torch.zeros(0, self.model.config.projection_dim)
            )
            return embeds, {"positions": positions}

        options = _IndexingOptions(batch_size, show_progress, False, True, append)
        for embeddings, payloads in self._encode_shared(
            list(range(len(captions))), options, "Indexing captions", encode
        ):
            positions = [position for payload in payloads for position in payload["positions"]]
            if positions:
                index.add(
                    self._for_index(embeddings), [ids[p] for p in positions], [captions[p] for p in positions]
                )
        return index

    def _encode_shared(
        self,
        positions: list[int],
        options: _IndexingOptions,
        description: str,
        encode: Callable[[list[int]], tuple[torch.Tensor, Any]],
    ) -> Any:
        """Encode ``positions`` in steps, each process its share of a step; yields, per step, the gathered
        embeddings and every process's payload in process order (which is the order of ``positions``)."""
        rank, processes = rank_and_world_size()
        step = options.batch_size * CLIPS_PER_STEP * processes
        progress = tqdm(
            total=len(positions), desc=description, disable=not options.show_progress or rank != 0
        )
        try:
            for start in range(0, len(positions), step):
                chunk = positions[start : start + step]
                share = chunk[len(chunk) * rank // processes : len(chunk) * (rank + 1) // processes]
                embeddings, payload = encode(share)
                yield gather_shards(embeddings, payload)
                progress.update(len(chunk))
        finally:
            progress.close()

    def _new_index(self, root: str | None = None) -> EmbeddingIndex:
        return EmbeddingIndex(
            self.model.config.projection_dim,
            metric=metric_for_scoring(self.model.config.scoring),
            kind=self.index_kind,
            fingerprint=model_fingerprint(self.model),
            root=root,
            **self.index_options,
        )

    # Persistence -------------------------------------------------------------------------------------

    def _default_index_dir(self) -> Path | None:
        model_dir = Path(str(getattr(self.model, "name_or_path", "") or ""))
        return model_dir / INDEX_DIRNAME if str(model_dir) and model_dir.is_dir() else None

    def _hub_index_dir(self) -> Path | None:
        """The ``retrieval_index`` folder of the Hub repository the model came from, if it has one.

        Downloads only that folder (:meth:`push_to_hub` puts it there); a model that is not from the
        Hub, a repository without an index, or no network (and nothing cached) gives ``None``.
        """
        repo_id = str(getattr(self.model, "name_or_path", "") or "")
        if not repo_id or os.path.exists(repo_id) or repo_id.count("/") != 1:
            return None
        try:
            snapshot = snapshot_download(repo_id, allow_patterns=[f"{INDEX_DIRNAME}/*"])
        except (
            OSError,
            ValueError,
        ) as error:  # huggingface_hub's HTTP, offline and not-found errors are OSErrors
            logger.info(f"No retrieval index fetched from {repo_id}: {error}")
            return None
        return Path(snapshot) / INDEX_DIRNAME

    def save_index(
        self, directory: str | os.PathLike | None = None, *, report_skipped: bool = True
    ) -> list[Path]:
        """Write the audio and/or caption index (safetensors + ids JSON) and ``skipped.tsv`` (the audio left
        out, ``path<TAB>reason``, when there is any); returns the files written.

        Under several processes only the first writes; every process returns once the files are there.

        Args:
            directory: default ``<model dir>/retrieval_index``, which the next ``pipeline()`` on that
                model directory loads automatically (and ``push_to_hub`` helpers upload).
            report_skipped: write ``skipped.tsv`` (a stale one is removed when nothing was skipped).
        """
        if directory is None:
            directory = self._default_index_dir()
            if directory is None:
                raise ValueError("The model was not loaded from a directory; pass save_index(directory).")
        if self.audio_index is None and self.text_index is None:
            raise ValueError("Nothing to save: build an index with `pipe.index(...)` first.")
        directory = Path(directory)
        rank, _ = rank_and_world_size()
        written = []
        for name, index in ((AUDIO_INDEX_NAME, self.audio_index), (TEXT_INDEX_NAME, self.text_index)):
            if index is not None:
                written.extend(
                    index.save(directory, name)
                    if rank == 0
                    else [directory / f"{name}.safetensors", directory / f"{name}.json"]
                )
        if report_skipped:
            report = directory / SKIPPED_FILENAME
            if self.skipped:
                if rank == 0:
                    write_skipped_report(report, self.skipped)
                written.append(report)
            elif rank == 0:
                report.unlink(missing_ok=True)
        wait_for_all()
        return written

    def load_index(self, directory: str | os.PathLike) -> None:
        """Load the indexes saved in ``directory`` (and its ``skipped.tsv``), checking dimension and model
        fingerprint.

        Raises:
            IndexFormatError: a corrupt file, or an index built by another model (rebuild it).
            FileNotFoundError: ``directory`` holds no index.
        """
        directory = Path(directory)
        found = [name for name in INDEX_NAMES if (directory / f"{name}.json").is_file()]
        if not found:
            raise FileNotFoundError(f"No {AUDIO_INDEX_NAME}.json or {TEXT_INDEX_NAME}.json in {directory}.")
        expected = {
            "expected_dim": self.model.config.projection_dim,
            "expected_fingerprint": model_fingerprint(self.model),
        }
        for name in found:
            index = EmbeddingIndex.load(directory, name, **expected)
            if name == AUDIO_INDEX_NAME:
                self.audio_index = index
            else:
                self.text_index = index
        report = directory / SKIPPED_FILENAME
        self.skipped = read_skipped_report(report) if report.is_file() else []

    def push_to_hub(self, repo_id: str, **upload: Any) -> Any:
        """Upload the model, its processor, its card and this pipeline's index in one commit.

        ``upload`` takes the options of :func:`hf_atr.hub.push_to_hub` (``eval_results``, ``private``, ...).
        ``pipeline("audio-text-retrieval", model=repo_id)`` loads the index again with the model. The local
        list of skipped files stays local.
        """
        if self.audio_index is None and self.text_index is None:
            raise ValueError(
                "This pipeline holds no index to push: build one with `pipe.index(...)`, or push the model "
                "alone with `model.push_to_hub(repo_id)`."
            )
        return hub.push_to_hub(
            self.model,
            repo_id,
            processor=self.processor,
            stage_extra=lambda staging: self.save_index(staging / INDEX_DIRNAME, report_skipped=False),
            **upload,
        )

    # Zero-shot classification ------------------------------------------------------------------------

    @torch.no_grad()
    def classify(
        self,
        audio: Any,
        labels: Sequence[str],
        *,
        templates: str | Sequence[str] | None = None,
        sampling_rate: int | None = None,
    ) -> list[dict[str, Any]] | list[list[dict[str, Any]]]:
        """Zero-shot classification of one clip (or a list of clips) into ``labels``.

        Each label becomes captions through ``templates`` (default ``"This is a sound of {}."``); several
        templates are averaged into one label embedding and re-normalised (CLIP's prompt ensembles).
        Scores are the softmax over labels of the model's ``logits_per_audio`` (audio scale · similarity), as
        transformers' ``zero-shot-audio-classification`` pipeline scores a ``ClapModel``. A clip longer than
        the extractor's window is embedded window by window and pooled (``windowing``).

        Args:
            audio: one clip (a path, an array, ``{"raw" | "array", "sampling_rate"}``), or a list of clips.
            sampling_rate: the rate of arrays given bare (default: the processor's, said once in the log).

        Returns:
            ``[{"label", "score"}]`` best first, or one such list per clip for a list of clips.
        """
        given = self._audio_clips(audio, sampling_rate, "the audio")
        labels = list(labels)
        label_embeds = encode_labels(self.model, self.processor, labels, templates)
        rows = [{"audio": clip, "audio_id": name} for clip, name in zip(given.clips, given.names)]
        audio_embeds = encode_audio(self.model, self.processor, rows, windowing=self.windowing)
        head = self.model.scoring_head
        device = head.logit_scale.device
        probabilities = (
            head.audio_logits(audio_embeds.to(device), label_embeds.to(device)).softmax(dim=-1).cpu()
        )
        results = [
            [{"label": labels[i], "score": float(row[i])} for i in row.argsort(descending=True).tolist()]
            for row in probabilities
        ]
        return results[0] if given.single else results


@dataclass(frozen=True)
class _IndexingOptions:
    batch_size: int
    show_progress: bool
    pool: bool
    strict: bool
    append: bool


def relative_id(path: str | os.PathLike, root: Path) -> str:
    """The id of a file under ``root``: its POSIX path relative to ``root``, or its absolute path when it
    lies elsewhere (``root / id`` resolves to the file either way)."""
    absolute = Path(path).expanduser().resolve()
    try:
        return absolute.relative_to(root).as_posix()
    except ValueError:
        return str(absolute)


def _check_unique_ids(ids: Sequence[str], sources: Sequence[str], index: EmbeddingIndex) -> None:
    """Raise naming both items when two share an id, or when an id is already in ``index``."""
    first_source: dict[str, str] = {}
    existing = set(index.ids)
    for item_id, source in zip(ids, sources):
        if item_id in first_source:
            raise ValueError(
                f"Duplicate id {item_id!r}: {first_source[item_id]} and {source}. Each item of an index needs its "
                "own id."
            )
        if item_id in existing:
            already = index.path_of(item_id) or item_id
            raise ValueError(
                f"Duplicate id {item_id!r}: {source} and {already}, which is already in the index. Give it "
                "another id, or leave indexed items out when appending."
            )
        first_source[item_id] = source


def _dataset_audio_paths(dataset: Any) -> list[str | None] | None:
    """The ``path`` field of a dataset's undecoded ``audio`` column, read without loading the audio bytes."""
    if "audio" not in dataset.column_names:
        return None
    flat = dataset.select_columns(["audio"]).flatten()
    return flat["audio.path"] if "audio.path" in flat.column_names else None


def _holds_waveforms(rows: Any) -> bool:
    """Whether rows carry audio to decode (and so to window), rather than only precomputed features."""
    columns = rows.column_names if hasattr(rows, "column_names") else (list(rows[0]) if len(rows) else [])
    return "audio" in columns or not any(name in columns for name in AUDIO_INPUT_NAMES)


def write_skipped_report(path: Path, skipped: Sequence[SkippedAudio]) -> None:
    """Write ``path`` (tab-separated, header ``path<TAB>reason``), replacing it in one rename."""
    with replaced_atomically(path) as partial, partial.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(["path", "reason"])
        writer.writerows((item.name, item.reason) for item in skipped)


def read_skipped_report(path: Path) -> list[SkippedAudio]:
    """The rows of a ``skipped.tsv`` written by :func:`write_skipped_report`."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))
    return [SkippedAudio(position, row[0], row[1]) for position, row in enumerate(rows[1:]) if len(row) == 2]


def _holds_index(directory: Path) -> bool:
    return any((directory / f"{name}.json").is_file() for name in INDEX_NAMES)


def register_pipeline() -> None:
    """Register the ``audio-text-retrieval`` task so that ``transformers.pipeline`` builds our pipeline."""
    registered = PIPELINE_REGISTRY.supported_tasks.get(TASK)
    if registered is not None and registered.get("impl") is AudioTextRetrievalPipeline:
        return
    PIPELINE_REGISTRY.register_pipeline(
        TASK, pipeline_class=AudioTextRetrievalPipeline, pt_model=AutoModel, type="multimodal"
    )


__all__ = [
    "APPLEDOUBLE_REASON",
    "AudioTextRetrievalPipeline",
    "INDEX_DIRNAME",
    "MissingIndexError",
    "SKIPPED_FILENAME",
    "label_prompts",
    "read_skipped_report",
    "register_pipeline",
    "relative_id",
    "write_skipped_report",
]

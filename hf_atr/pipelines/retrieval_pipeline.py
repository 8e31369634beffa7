"""The ``audio-text-retrieval`` pipeline class: its construction and its queries; its other methods are mixed in.

``pipeline("audio-text-retrieval")``: index a corpus once, then search it with text or audio queries. The class
takes ``index`` / ``save_index`` / ``load_index`` from :mod:`.index_methods`, ``moments`` from
:mod:`.moment_search` and ``classify`` from :mod:`.zero_shot_classification` (one mixin each); the work is the
modules' beside it (:mod:`.indexing`, :mod:`.persistence`, :mod:`.sharing`, :mod:`.moment_scoring`), and its
``push_to_hub`` is a thin call.

Example::

    import hf_atr  # registers the task
    from transformers import pipeline

    pipe = pipeline("audio-text-retrieval", model="runs/atr-clotho")
    pipe.index(clips_dataset)                 # audio clips (and their captions) -> faiss indexes
    pipe("a dog barks", top_k=5)              # [{"id": "clip_17", "score": 0.61, "start": 20.0, "end": 30.0}, ...]
    pipe("dog.wav", top_k=5)                  # [{"id": "clip_17#0", "score": 0.61, "caption": "..."}, ...]
    pipe(audio="dog.wav", top_k=5)            # query by example: the clips that sound most alike
    pipe.classify("dog.wav", labels=["dog", "rain", "siren"])   # [{"label": "dog", "score": 0.92}, ...]
    pipe.moments("a dog barks", "field.wav")  # [{"start": 41.0, "end": 43.5, "score": 0.58}, ...]: when it happens
    pipe.save_index()                         # next to the model; loaded again by the next pipeline()

Audio is read as transformers' audio pipelines read it, the same wherever it is accepted (queries, query by
example, :meth:`~AudioTextRetrievalPipeline.classify`, :meth:`~AudioTextRetrievalPipeline.index`;
:func:`hf_atr.data.audio_arrays.audio_clips`): a file path, ``{"raw" | "array": samples, "sampling_rate": rate}``, or
an array; one array is one clip (a 2-D array is one multi-channel clip in either orientation, mixed down as a
file is), a batch is a list, and an array without a rate is taken at the processor's rate, said once in the log.

Long recordings are indexed window by window (:mod:`hf_atr.windowing`) and searched whole: a hit is a file
with its best-matching span. Files that cannot be decoded are skipped and listed (``pipe.skipped``,
``skipped.tsv`` beside the saved index) unless ``strict=True``. Under several processes (``accelerate
launch``, ``torchrun``) :meth:`AudioTextRetrievalPipeline.index` encodes a share of the items on each
process and every process ends with the same index as one process would build.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModel, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.utils import logging

from hf_atr.audio_encoding import SkippedAudio, float32_embeddings
from hf_atr.data.audio import decode_audio, looks_like_audio_path
from hf_atr.data.audio_arrays import AudioClips, audio_clips
from hf_atr.export.onnx_encoder import OnnxDualEncoder
from hf_atr.pipelines.device_search import checked_device, checked_dtype
from hf_atr.pipelines.index import EmbeddingIndex
from hf_atr.pipelines.index_methods import IndexMethods
from hf_atr.pipelines.index_storage import model_dtype
from hf_atr.pipelines.indexing import index_vectors
from hf_atr.pipelines.moment_search import MomentSearch
from hf_atr.pipelines.persistence import AUDIO_INDEX_NAME, TEXT_INDEX_NAME, default_index_dir, holds_index
from hf_atr.pipelines.sharing import hub_index_dir, push_pipeline_to_hub
from hf_atr.pipelines.zero_shot_classification import ZeroShotClassification
from hf_atr.processing_atr import AtrProcessor
from hf_atr.windowing import Windowing, pool_window_embeddings, window_bounds

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from hf_atr.hub import HubUpload

logger = logging.get_logger(__name__)

TASK = "audio-text-retrieval"


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


class AudioTextRetrievalPipeline(IndexMethods, MomentSearch, ZeroShotClassification, Pipeline):
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
        search_device: search every index exactly on this torch device (``"cuda"``; ``"cpu"`` runs the same
            code), whatever its kind (:meth:`EmbeddingIndex.search_on`); default ``None``: faiss on the CPU.
            transformers' ``device=`` places the model only.
        search_dtype: ``"float32"`` (default) or ``"float16"``, how the vectors are held on ``search_device``.
        backend: ``"torch"`` (default) or ``"onnx"``: ``model`` is then the folder ``hf-atr export --format onnx``
            wrote (or its :class:`~hf_atr.export.onnx_encoder.OnnxDualEncoder`), and queries and indexing encode
            through ONNX Runtime; an index built by the torch model is accepted (the export carries its fingerprint).
            Torch is still imported: the processor's tensors, the scoring head and the index's search are torch's.
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
        search_device: str | torch.device | None = None,
        search_dtype: str = "float32",
        backend: str = "torch",
        **kwargs: Any,
    ) -> None:
        self.search_device = None if search_device is None else checked_device(search_device)
        self.search_dtype = search_dtype
        checked_dtype(search_dtype)
        super().__init__(*args, **kwargs)
        check_backend(self.model, backend)
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
        self._said_dtype: weakref.WeakSet[EmbeddingIndex] = weakref.WeakSet()
        if index_dir is None:
            index_dir = default_index_dir(self.model) or hub_index_dir(self.model)
            if index_dir is None or not holds_index(index_dir):
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
        given = self.read_audio(audio, sampling_rate, "the audio query")
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

    def read_audio(self, audio: Any, sampling_rate: int | None = None, name: str = "the audio") -> AudioClips:
        """``audio`` read as users hand it over, the one contract of queries, :meth:`classify` and :meth:`index`
        (:func:`~hf_atr.data.audio_arrays.audio_clips`, arrays without a rate taken at the processor's); the first such
        array of this pipeline is named in the log, once. ``name`` names a single clip in messages."""
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
        # Embeddings leave the model as float32 whatever its dtype: the index and the scores keep one dtype.
        if modality == "text":
            embeds = float32_embeddings(self.model.get_text_features(**model_inputs), self.model)
        else:
            window_embeds = float32_embeddings(self.model.get_audio_features(**model_inputs), self.model)
            embeds = pool_window_embeddings(
                window_embeds,
                self.windowing.pooling,
                normalize=self.model.scoring_head.normalizes_embeddings,
            )[None]
        return {"modality": modality, "target": target, "embeds": embeds}

    def postprocess(self, model_outputs: dict[str, Any], top_k: int = 5) -> list[dict[str, Any]]:
        target = model_outputs["target"]
        gallery = self.audio_index if target == AUDIO_INDEX_NAME else self.text_index
        if gallery is None or len(gallery) == 0:
            raise MissingIndexError(model_outputs["modality"], target)
        if self.search_device is not None:
            gallery.search_on(self.search_device, self.search_dtype)
        self.note_query_dtype(gallery)
        scores, positions = gallery.search_files(index_vectors(self.model, model_outputs["embeds"]), top_k)
        return [
            self._hit(gallery, int(position), float(score))
            for score, position in zip(scores[0], positions[0])
            if position >= 0
        ]

    def note_query_dtype(self, index: EmbeddingIndex) -> None:
        """Say once per index when this pipeline's model computes its queries in another dtype than the one
        ``index``'s embeddings were computed in (the search runs all the same: both are float32 vectors, and the
        rankings differ from those of one precision by what that precision costs, docs/half-precision.md)."""
        dtype = model_dtype(self.model)
        if index.embedding_dtype == dtype or index in self._said_dtype:
            return
        self._said_dtype.add(index)
        logger.warning(
            f"The index's embeddings were computed in {index.embedding_dtype} and this model computes the queries in "
            f"{dtype} (said once per index): the search runs, and its scores mix the two precisions. Load the model "
            f"in {index.embedding_dtype} for queries of the index's own precision."
        )

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

    # The Hub: hf_atr.pipelines.sharing does the work -------------------------------------------------

    def push_to_hub(self, repo_id: str, **upload: Unpack[HubUpload]) -> Any:
        """Upload the model, its processor, its card and this pipeline's index in one commit.

        ``upload`` takes the options of :func:`hf_atr.push_to_hub` (:class:`~hf_atr.hub.HubUpload`:
        ``eval_results``, ``private``, ...); ``processor`` defaults to the pipeline's.
        ``pipeline("audio-text-retrieval", model=repo_id)`` loads the index again with the model. The local
        list of skipped files stays local.
        """
        return push_pipeline_to_hub(self, repo_id, **upload)


BACKENDS = ("torch", "onnx")


def check_backend(model: Any, backend: str) -> None:
    """Raise unless ``model`` is what ``backend`` runs: an ONNX export for ``"onnx"``, a torch model for ``"torch"``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}.")
    is_onnx = isinstance(model, OnnxDualEncoder)
    if backend == "onnx" and not is_onnx:
        raise ValueError(
            "backend='onnx' needs the folder `hf-atr export --format onnx` wrote (it holds onnx_export.json), not a "
            "torch model."
        )
    if backend == "torch" and is_onnx:
        raise ValueError(f"{model.name_or_path} holds an ONNX export: pass backend='onnx' to run it.")


def register_pipeline() -> None:
    """Register the ``audio-text-retrieval`` task so that ``transformers.pipeline`` builds our pipeline: from a saved
    model (``AutoModel``), or, when that finds no torch weights, from an ONNX export (:class:`OnnxDualEncoder`)."""
    registered = PIPELINE_REGISTRY.supported_tasks.get(TASK)
    if registered is not None and registered.get("impl") is AudioTextRetrievalPipeline:
        return
    PIPELINE_REGISTRY.register_pipeline(
        TASK,
        pipeline_class=AudioTextRetrievalPipeline,
        pt_model=(AutoModel, OnnxDualEncoder),
        type="multimodal",
    )


__all__ = [
    "BACKENDS",
    "AudioTextRetrievalPipeline",
    "MissingIndexError",
    "check_backend",
    "register_pipeline",
]

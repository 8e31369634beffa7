"""``pipeline("audio-text-retrieval")``: index a corpus once, then search it with text or audio queries.

Example::

    import hf_atr  # registers the task
    from transformers import pipeline

    pipe = pipeline("audio-text-retrieval", model="runs/atr-clotho")
    pipe.index(clips_dataset)                 # audio clips (and their captions) -> faiss indexes
    pipe("a dog barks", top_k=5)              # [{"id": "clip_17", "score": 0.61}, ...]
    pipe("dog.wav", top_k=5)                  # [{"id": "clip_17#0", "score": 0.61, "caption": "..."}, ...]
    pipe.classify("dog.wav", labels=["dog", "rain", "siren"])   # [{"label": "dog", "score": 0.92}, ...]
    pipe.save_index()                         # next to the model; loaded again by the next pipeline()
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from huggingface_hub import snapshot_download
from transformers import AutoModel, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.utils import logging

from hf_atr import hub
from hf_atr.encoding import encode_audio, encode_labels, encode_text, label_prompts
from hf_atr.pipelines.index import EmbeddingIndex, metric_for_scoring, model_fingerprint
from hf_atr.processing_atr import AtrProcessor

logger = logging.get_logger(__name__)

TASK = "audio-text-retrieval"
INDEX_DIRNAME = "retrieval_index"
"""Sub-folder of a model directory where :meth:`AudioTextRetrievalPipeline.save_index` writes by default."""
AUDIO_INDEX_NAME = "audio_index"
TEXT_INDEX_NAME = "text_index"
INDEX_NAMES = (AUDIO_INDEX_NAME, TEXT_INDEX_NAME)


class AudioTextRetrievalPipeline(Pipeline):
    """Text→audio and audio→text search over an indexed corpus, and zero-shot audio classification.

    Built by ``pipeline("audio-text-retrieval", model=dir)`` after ``import hf_atr`` (the directory holds
    an :class:`~hf_atr.AtrDualEncoderModel` and its :class:`~hf_atr.AtrProcessor`).

    - :meth:`index` encodes a corpus once: audio clips (arrays, paths, or a ``datasets.Dataset`` of the
      shared schema, raw or with precomputed features) into the audio index; captions (a list of
      strings, or a dataset's ``captions`` column) into the caption index.
    - ``pipe(query, top_k=5)``: a string is a text query (unless it names an existing file) and
      returns the best clips ``[{"id", "score"}]``; audio (array, path, ``{"array", "sampling_rate"}``)
      returns the best captions ``[{"id", "score", "caption"}]``. Scores are the model's unscaled
      similarity: cosine, or the negative Euclidean/Mahalanobis distance.
    - :meth:`classify` does zero-shot classification with caption templates.
    - :meth:`save_index` / :meth:`load_index` persist the indexes (safetensors + JSON); an index saved in
      ``<model dir>/retrieval_index`` (or in the model's Hub repository) is loaded automatically;
      :meth:`push_to_hub` uploads it with the model.

    Args:
        index_dir: a directory written by :meth:`save_index` to load at construction.
        index_kind: ``"flat"`` (exact, default), ``"ivf"`` or ``"hnsw"`` for indexes built by :meth:`index`.
        index_options: further :class:`~hf_atr.pipelines.index.EmbeddingIndex` options (``nprobe``, ...).
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
        self.audio_index: EmbeddingIndex | None = None
        self.text_index: EmbeddingIndex | None = None
        if index_dir is None:
            index_dir = self._default_index_dir() or self._hub_index_dir()
            if index_dir is None or not _holds_index(index_dir):
                return
            logger.info(f"Loading the retrieval index saved next to the model in {index_dir}.")
        self.load_index(index_dir)

    # Queries -----------------------------------------------------------------------------------------

    def _sanitize_parameters(self, top_k: int | None = None, sampling_rate: int | None = None):
        preprocess_params = {} if sampling_rate is None else {"sampling_rate": sampling_rate}
        postprocess_params = {} if top_k is None else {"top_k": top_k}
        return preprocess_params, {}, postprocess_params

    def preprocess(self, query: Any, sampling_rate: int | None = None) -> dict[str, Any]:
        if _is_text_query(query):
            if not query.strip():
                raise ValueError("The text query is empty.")
            return {"modality": "text", **self.processor(text=[query], return_tensors="pt")}
        return {
            "modality": "audio",
            **self.processor(audio=[query], sampling_rate=sampling_rate, return_tensors="pt"),
        }

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        modality = model_inputs.pop("modality")
        if modality == "text":
            embeds = self.model.get_text_features(**model_inputs)
        else:
            embeds = self.model.get_audio_features(**model_inputs)
        return {"modality": modality, "embeds": embeds}

    def postprocess(self, model_outputs: dict[str, Any], top_k: int = 5) -> list[dict[str, Any]]:
        # A text query searches the clips; an audio query searches the captions.
        gallery = self.audio_index if model_outputs["modality"] == "text" else self.text_index
        if gallery is None:
            wanted = "audio clips" if model_outputs["modality"] == "text" else "captions"
            raise ValueError(
                f"A {model_outputs['modality']} query needs an index of {wanted}: call `pipe.index(...)` with "
                f"{wanted} (or a Dataset), or `pipe.load_index(dir)`."
            )
        scores, positions = gallery.search(self._for_index(model_outputs["embeds"]), top_k)
        return [
            self._hit(gallery, int(position), float(score))
            for score, position in zip(scores[0], positions[0])
            if position >= 0
        ]

    @staticmethod
    def _hit(gallery: EmbeddingIndex, position: int, score: float) -> dict[str, Any]:
        hit: dict[str, Any] = {"id": gallery.ids[position], "score": score}
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
    ) -> EmbeddingIndex:
        """Encode ``corpus`` once (batched, with a progress bar) and replace the matching index.

        Args:
            corpus: a list of captions (strings) → caption index; a list of audio (arrays at the
                processor's rate, file paths, ``{"array", "sampling_rate"}`` dicts) → audio index; a
                ``datasets.Dataset`` with ``audio`` or precomputed features → audio index with ids from
                its ``audio_id`` column, and, when it has ``captions`` and ``index_captions``, a caption
                index whose ids are ``"<audio_id>#<slot>"``.
            ids: one id per item (lists only); default: file paths for paths, else ``"0"``, ``"1"``, ...

        Returns:
            The audio index, or the caption index for a list of captions.
        """
        if isinstance(corpus, (str, np.ndarray)) or not hasattr(corpus, "__len__") or len(corpus) == 0:
            raise ValueError(
                "index() needs a non-empty list of captions or audio clips, or a datasets.Dataset."
            )
        if ids is not None and len(ids) != len(corpus):
            raise ValueError(f"Got {len(corpus)} items but {len(ids)} ids.")
        if hasattr(corpus, "column_names"):
            if ids is not None:
                raise ValueError("A Dataset brings its ids in its `audio_id` column; do not pass `ids`.")
            return self._index_dataset(corpus, batch_size, index_captions, show_progress)
        items = list(corpus)
        if all(isinstance(item, str) and not os.path.isfile(item) for item in items):
            ids = [str(i) for i in range(len(items))] if ids is None else ids
            self.text_index = self._encode_captions(items, ids, batch_size, show_progress)
            return self.text_index
        if ids is None:
            ids = [
                str(item) if isinstance(item, (str, os.PathLike)) else str(i) for i, item in enumerate(items)
            ]
        rows = [{"audio": item, "audio_id": str(audio_id)} for item, audio_id in zip(items, ids)]
        self.audio_index = self._encode_audio(
            rows, [str(audio_id) for audio_id in ids], batch_size, show_progress
        )
        return self.audio_index

    def _index_dataset(
        self, dataset: Any, batch_size: int, index_captions: bool, show_progress: bool
    ) -> EmbeddingIndex:
        if "audio_id" not in dataset.column_names:
            raise ValueError(f"The dataset needs an `audio_id` column (columns: {dataset.column_names}).")
        audio_ids = [str(audio_id) for audio_id in dataset["audio_id"]]
        if len(set(audio_ids)) != len(audio_ids):
            raise ValueError("The dataset's `audio_id` values are not unique; each clip needs its own id.")
        self.audio_index = self._encode_audio(dataset, audio_ids, batch_size, show_progress)
        if index_captions and "captions" in dataset.column_names:
            caption_ids, captions = [], []
            for audio_id, clip_captions in zip(audio_ids, dataset["captions"]):
                for slot, caption in enumerate(clip_captions or []):
                    caption_ids.append(f"{audio_id}#{slot}")
                    captions.append(caption)
            self.text_index = self._encode_captions(captions, caption_ids, 4 * batch_size, show_progress)
        return self.audio_index

    def _encode_audio(
        self, rows: Any, ids: Sequence[str], batch_size: int, show_progress: bool
    ) -> EmbeddingIndex:
        embeds = encode_audio(
            self.model, self.processor, rows, batch_size=batch_size, show_progress=show_progress
        )
        return self._new_index(embeds, ids)

    def _encode_captions(
        self, captions: Sequence[str], ids: Sequence[str], batch_size: int, show_progress: bool
    ) -> EmbeddingIndex:
        embeds = encode_text(
            self.model, self.processor, captions, batch_size=batch_size, show_progress=show_progress
        )
        return self._new_index(embeds, ids, captions)

    def _new_index(
        self, embeds: torch.Tensor, ids: Sequence[str], captions: Sequence[str] | None = None
    ) -> EmbeddingIndex:
        index = EmbeddingIndex(
            self.model.config.projection_dim,
            metric=metric_for_scoring(self.model.config.scoring),
            kind=self.index_kind,
            fingerprint=model_fingerprint(self.model),
            **self.index_options,
        )
        index.add(self._for_index(embeds), ids, captions)
        return index

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

    def save_index(self, directory: str | os.PathLike | None = None) -> list[Path]:
        """Write the audio and/or caption index (safetensors + ids JSON); returns the files written.

        Args:
            directory: default ``<model dir>/retrieval_index``, which the next ``pipeline()`` on that
                model directory loads automatically (and ``push_to_hub`` helpers upload).
        """
        if directory is None:
            directory = self._default_index_dir()
            if directory is None:
                raise ValueError("The model was not loaded from a directory; pass save_index(directory).")
        if self.audio_index is None and self.text_index is None:
            raise ValueError("Nothing to save: build an index with `pipe.index(...)` first.")
        written = []
        for name, index in ((AUDIO_INDEX_NAME, self.audio_index), (TEXT_INDEX_NAME, self.text_index)):
            if index is not None:
                written.extend(index.save(directory, name))
        return written

    def load_index(self, directory: str | os.PathLike) -> None:
        """Load the indexes saved in ``directory``, checking dimension and model fingerprint.

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

    def push_to_hub(self, repo_id: str, **upload: Any) -> Any:
        """Upload the model, its processor, its card and this pipeline's index in one commit.

        ``upload`` takes the options of :func:`hf_atr.hub.push_to_hub` (``eval_results``, ``private``, ...).
        ``pipeline("audio-text-retrieval", model=repo_id)`` loads the index again with the model.
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
            stage_extra=lambda staging: self.save_index(staging / INDEX_DIRNAME),
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
        transformers' ``zero-shot-audio-classification`` pipeline scores a ``ClapModel``.

        Returns:
            ``[{"label", "score"}]`` best first, or one such list per clip for a list of clips.
        """
        labels = list(labels)
        label_embeds = encode_labels(self.model, self.processor, labels, templates)
        single = isinstance(audio, (str, os.PathLike, dict)) or (
            isinstance(audio, np.ndarray) and audio.ndim == 1
        )
        clips = [audio] if single else list(audio)
        inputs = self.processor(audio=clips, sampling_rate=sampling_rate, return_tensors="pt")
        device = next(self.model.parameters()).device
        audio_embeds = self.model.get_audio_features(
            **{key: value.to(device) for key, value in inputs.items()}
        )
        head = self.model.scoring_head
        probabilities = head.audio_logits(audio_embeds, label_embeds.to(device)).softmax(dim=-1).cpu()
        results = [
            [{"label": labels[i], "score": float(row[i])} for i in row.argsort(descending=True).tolist()]
            for row in probabilities
        ]
        return results[0] if single else results


def _holds_index(directory: Path) -> bool:
    return any((directory / f"{name}.json").is_file() for name in INDEX_NAMES)


def _is_text_query(query: Any) -> bool:
    """A string is a caption unless it names an existing file (then it is an audio path)."""
    return isinstance(query, str) and not os.path.isfile(query)


def register_pipeline() -> None:
    """Register the ``audio-text-retrieval`` task so that ``transformers.pipeline`` builds our pipeline."""
    registered = PIPELINE_REGISTRY.supported_tasks.get(TASK)
    if registered is not None and registered.get("impl") is AudioTextRetrievalPipeline:
        return
    PIPELINE_REGISTRY.register_pipeline(
        TASK, pipeline_class=AudioTextRetrievalPipeline, pt_model=AutoModel, type="multimodal"
    )


__all__ = ["AudioTextRetrievalPipeline", "INDEX_DIRNAME", "label_prompts", "register_pipeline"]

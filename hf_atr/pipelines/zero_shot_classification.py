"""Zero-shot audio classification by the retrieval pipeline: ``pipe.classify(audio, labels)``.

:class:`ZeroShotClassification` is mixed into :class:`~hf_atr.pipelines.retrieval_pipeline.AudioTextRetrievalPipeline`,
where users call :meth:`~ZeroShotClassification.classify`: the labels become caption embeddings through templates
(:func:`hf_atr.encoding.encode_labels`), the clips audio embeddings (:func:`hf_atr.audio_encoding.encode_audio`),
and the model's scoring head scores each clip against every label.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hf_atr.audio_encoding import encode_audio
from hf_atr.encoding import encode_labels


class ZeroShotClassification:
    """``classify`` of the retrieval pipeline: it reads audio with the pipeline's ``read_audio`` and encodes with its
    model, processor and windowing."""

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
        templates are averaged into one label embedding and re-normalised (CLIP's prompt ensembles; a ``dot``-scoring
        model, such as one converted from PE-Audio, scores the mean as it is).
        Scores are the softmax over labels of the model's ``logits_per_audio`` (audio scale · similarity), as
        transformers' ``zero-shot-audio-classification`` pipeline scores a ``ClapModel``. A clip longer than
        the extractor's window is embedded window by window and pooled (``windowing``).

        Args:
            audio: one clip (a path, an array, ``{"raw" | "array", "sampling_rate"}``), or a list of clips.
            sampling_rate: the rate of arrays given bare (default: the processor's, said once in the log).

        Returns:
            ``[{"label", "score"}]`` best first, or one such list per clip for a list of clips.
        """
        given = self.read_audio(audio, sampling_rate, "the audio")
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


__all__ = ["ZeroShotClassification"]

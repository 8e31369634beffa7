"""The retrieval pipeline's moment search: ``pipe.moments(query, recording)``, when a described sound happens.

:class:`MomentSearch` is mixed into :class:`~hf_atr.pipelines.retrieval_pipeline.AudioTextRetrievalPipeline`, where
users call :meth:`~MomentSearch.moments`; the work is :func:`~hf_atr.pipelines.moment_scoring.find_moments`'s.
"""

from __future__ import annotations

from typing import Any

from hf_atr.moments.proposal import MomentProposalConfig
from hf_atr.pipelines.moment_scoring import DEFAULT_TOP_K, find_moments


class MomentSearch:
    """``moments`` of the retrieval pipeline: it reads the pipeline's model, processor, windowing and audio index."""

    def moments(
        self,
        query: str,
        recording: Any = None,
        *,
        top_k: int = DEFAULT_TOP_K,
        hop_seconds: float | None = None,
        proposal: MomentProposalConfig | None = None,
        sampling_rate: int | None = None,
        batch_size: int = 32,
    ) -> list[dict[str, Any]]:
        """When a described sound happens: the moments of ``recording`` (or of every indexed file) that match the
        text ``query``, best first.

        The recording is scored frame by frame by a model with frame-level embeddings (``config.audio_frame_rate``:
        one score per 40-ms frame of PE-Audio), else (or when ``hop_seconds`` is given) window by window (the
        pipeline's window length, every ``hop_seconds``: default 1 s, or the pipeline's hop when finer), into a
        similarity curve, which ``proposal`` turns into moments
        (:class:`~hf_atr.moments.proposal.MomentProposalConfig`: smoothing, thresholds relative to the
        recording's own scores, boundaries at the curve's resolution, temporal NMS; or the AMR paper's
        sliding-window baseline). :mod:`hf_atr.pipelines.moment_scoring` says how.

        Args:
            query: a description of the sound (text).
            recording: one recording as queries take audio (a path, an array, ``{"raw" | "array",
                "sampling_rate"}``). A file the audio index holds is scored from its stored entries (nothing is
                encoded) when they are of the kind it would be scored with (frames or windows), unless
                ``hop_seconds`` is given. ``None``: every file of the audio index, from its stored entries.
            top_k: how many moments to return (per recording, or across the index's files).

        Returns:
            ``[{"start", "end", "score"}]`` for a recording; ``[{"id", "score", "start", "end", "path"?}]`` across
            the index (``path`` when the index knows its folder). Times in seconds, scores the model's similarity.
        """
        return find_moments(
            self,
            query,
            recording,
            top_k=top_k,
            hop_seconds=hop_seconds,
            proposal=proposal,
            sampling_rate=sampling_rate,
            batch_size=batch_size,
        )


__all__ = ["MomentSearch"]

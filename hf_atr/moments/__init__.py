"""Moments in long recordings: similarity curves (:mod:`.curve`) and the proposers that turn them into ranked
``[start, end, score]`` moments (:mod:`.proposal`). Pure NumPy (SciPy for smoothing), knowing no model: the curves
come from :mod:`hf_atr.pipelines.moment_scoring` (a dual encoder, window by window) or from a frame-level model."""

from .curve import DEFAULT_FRAME_RATE, SimilarityCurve
from .proposal import (
    Moment,
    MomentProposalConfig,
    prediction_record,
    propose_moments,
    refined_moments,
    sliding_window_moments,
    temporal_nms,
)

__all__ = [
    "DEFAULT_FRAME_RATE",
    "Moment",
    "MomentProposalConfig",
    "SimilarityCurve",
    "prediction_record",
    "propose_moments",
    "refined_moments",
    "sliding_window_moments",
    "temporal_nms",
]

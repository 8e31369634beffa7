"""Which transformers feature extractor has which batched torch implementation.

Built in: ``ASTFeatureExtractor`` -> :class:`AstFbankFeatures`, ``WhisperFeatureExtractor`` ->
:class:`WhisperLogMelFeatures`, ``ClapFeatureExtractor`` -> :class:`ClapLogMelFeatures`,
``PeAudioFeatureExtractor`` -> :class:`PeAudioWaveformFeatures` (raw waveforms, no spectrogram), and hf-atr's
``PannsFeatureExtractor`` -> :class:`PannsLogMelFeatures`. PANNs is named by its qualified class name, so
that this floor and ``hf_atr.models`` (the same floor) never import each other. Another family plugs in
with one call::

    register_batched_features(MyFeatureExtractor, MyLogMelFeatures)

Lookup is by exact class: a subclass may compute something else, so it falls back to transformers until it
is registered itself. Each implementation also declares the window its extractor reads of a clip
(:meth:`BatchedFeatureExtractor.clip_window`), which :func:`hf_atr.windowing.extractor_window` reads from here.
"""

from __future__ import annotations

from typing import Any

from transformers import (
    ASTFeatureExtractor,
    ClapFeatureExtractor,
    PeAudioFeatureExtractor,
    WhisperFeatureExtractor,
)
from transformers.utils import logging

from .ast_fbank import AstFbankFeatures
from .base import BatchedFeatureExtractor
from .clap_log_mel import ClapLogMelFeatures
from .panns_log_mel import PannsLogMelFeatures
from .pe_audio_waveform import PeAudioWaveformFeatures
from .whisper_log_mel import WhisperLogMelFeatures

logger = logging.get_logger(__name__)

_IMPLEMENTATIONS_BY_NAME: dict[str, type[BatchedFeatureExtractor]] = {
    "hf_atr.models.panns.feature_extraction_panns.PannsFeatureExtractor": PannsLogMelFeatures,
}
"""Extractor classes of hf-atr's own model families, by ``module.qualname`` (no import between floors)."""

_IMPLEMENTATIONS: dict[type, type[BatchedFeatureExtractor]] = {
    ASTFeatureExtractor: AstFbankFeatures,
    WhisperFeatureExtractor: WhisperLogMelFeatures,
    ClapFeatureExtractor: ClapLogMelFeatures,
    PeAudioFeatureExtractor: PeAudioWaveformFeatures,
}


def register_batched_features(
    extractor_class: type, implementation: type[BatchedFeatureExtractor], *, exist_ok: bool = False
) -> None:
    """Map ``extractor_class`` to ``implementation`` (built with ``implementation.from_extractor``).

    Raises:
        TypeError: ``implementation`` is not a :class:`BatchedFeatureExtractor` subclass.
        ValueError: ``extractor_class`` already has an implementation and ``exist_ok`` is false.
    """
    if not (isinstance(implementation, type) and issubclass(implementation, BatchedFeatureExtractor)):
        raise TypeError(f"{implementation!r} is not a BatchedFeatureExtractor subclass.")
    existing = _IMPLEMENTATIONS.get(extractor_class)
    if existing is not None and existing is not implementation and not exist_ok:
        raise ValueError(
            f"{extractor_class.__name__} already uses {existing.__name__}; pass exist_ok=True to replace it."
        )
    _IMPLEMENTATIONS[extractor_class] = implementation


def supported_extractors() -> tuple[type, ...]:
    """The feature-extractor classes registered with a batched torch implementation (hf-atr's own PANNs
    extractor is found by name, see :data:`_IMPLEMENTATIONS_BY_NAME`)."""
    return tuple(_IMPLEMENTATIONS)


def batched_features_class(extractor: Any) -> type[BatchedFeatureExtractor] | None:
    """The class of ``extractor``'s batched torch twin, unbuilt; ``None`` when its class has none."""
    extractor_class = type(extractor)
    return _IMPLEMENTATIONS.get(extractor_class) or _IMPLEMENTATIONS_BY_NAME.get(
        f"{extractor_class.__module__}.{extractor_class.__qualname__}"
    )


def batched_features_for(extractor: Any) -> BatchedFeatureExtractor | None:
    """The batched torch twin of ``extractor``, built from its current settings; ``None`` (logged once per
    class at info level) when its class has none, so the caller uses the transformers extractor."""
    implementation = batched_features_class(extractor)
    if implementation is None:
        logger.info_once(
            f"No batched torch features for {type(extractor).__name__} (supported: "
            f"{sorted([cls.__name__ for cls in _IMPLEMENTATIONS] + [name.rsplit('.', 1)[1] for name in _IMPLEMENTATIONS_BY_NAME])}); "
            "using the transformers extractor."
        )
        return None
    return implementation.from_extractor(extractor)

"""Configuration of the audio-text dual encoder."""

from __future__ import annotations

import math
from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .objectives.registry import default_scoring, validate_objective_config

SCORING_KINDS = ("cosine", "euclidean", "mahalanobis")
POOLING_KINDS = ("mean", "cls", "pooler")
DEFAULT_OBJECTIVE = {"name": "contrastive"}


@strict
class AtrConfig(PreTrainedConfig):
    r"""Configuration of an :class:`~hf_atr.AtrDualEncoderModel`: any transformers audio backbone, any text
    backbone, linear projections to a shared space and a scoring head.

    Args:
        audio_config (`dict` or `PreTrainedConfig`):
            Configuration of the audio backbone (e.g. `ASTConfig`, `WhisperConfig` — its encoder is used,
            `ClapAudioConfig`). A dict needs a `model_type`; defaults to an AST.
        text_config (`dict` or `PreTrainedConfig`):
            Configuration of the text backbone (e.g. `BertConfig`, `XLMRobertaConfig`); defaults to BERT.
        projection_dim (`int`, defaults to 512):
            Size of the shared embedding space.
        audio_pooling / text_pooling (`str`, defaults to `"mean"`):
            How a sequence of hidden states becomes one vector: `"mean"` (masked mean), `"cls"` (first token)
            or `"pooler"` (the backbone's `pooler_output`).
        scoring (`str`, *optional*):
            Scoring head: `"cosine"` similarity, negative `"euclidean"` distance, or negative
            `"mahalanobis"` distance with a learnable PSD matrix (m-LTM Eq. 9). It is also the ground cost of
            the OT objectives. Defaults to the metric of the objective's paper
            (`hf_atr.objectives.registry.default_scoring`): `"euclidean"` for `iot`, `iot_partial` and `dart` on
            an IOT base (DART Eq. 4, m-LTM Eq. 9 with M = I), `"cosine"` for the contrastive objectives
            (`contrastive`, `triplet`, `kcl`, `cacl`, `random_language`, `ask`, `dart` on a contrastive base).
            For unit embeddings both rank identically; the OT objectives' plans and gradients differ.
        logit_scale_init (`float`, defaults to log(1/0.07)):
            Initial log inverse temperature of the scoring head (CLIP's 2.6592).
        objective (`dict`, defaults to `{"name": "contrastive"}`):
            Training objective: a registered name and its hyperparameters, e.g.
            `{"name": "triplet", "margin": 0.2}`. See `hf_atr.objectives.available_objectives()`.

    Example:

    ```python
    >>> from transformers import ASTConfig, BertConfig
    >>> from hf_atr import AtrConfig, AtrDualEncoderModel
    >>> config = AtrConfig(audio_config=ASTConfig(), text_config=BertConfig(), projection_dim=256,
    ...                    objective={"name": "contrastive", "temperature": 0.05})
    >>> model = AtrDualEncoderModel(config)
    ```
    """

    model_type = "audio-text-retrieval"
    sub_configs_defaults = {
        "audio_config": SubConfigSpec(config_class=AutoConfig, model_type="audio-spectrogram-transformer"),
        "text_config": SubConfigSpec(config_class=AutoConfig, model_type="bert"),
    }

    audio_config: PreTrainedConfig | dict | None = None
    text_config: PreTrainedConfig | dict | None = None
    projection_dim: int = 512
    audio_pooling: str = "mean"
    text_pooling: str = "mean"
    scoring: str | None = None
    logit_scale_init: float = math.log(1 / 0.07)
    objective: dict[str, Any] | None = None

    def __post_init__(self, **kwargs):
        if self.objective is None:
            self.objective = dict(DEFAULT_OBJECTIVE)
        validate_objective_config(self.objective)
        if self.scoring is None:
            self.scoring = default_scoring(self.objective)
        self._check_values()
        super().__post_init__(**kwargs)

    def _check_values(self) -> None:
        """Fail at construction with a plain ``ValueError`` that lists the allowed values."""
        if self.scoring not in SCORING_KINDS:
            raise ValueError(f"`scoring` must be one of {SCORING_KINDS}, got {self.scoring!r}.")
        for field_name in ("audio_pooling", "text_pooling"):
            if getattr(self, field_name) not in POOLING_KINDS:
                raise ValueError(
                    f"`{field_name}` must be one of {POOLING_KINDS}, got {getattr(self, field_name)!r}."
                )
        if not isinstance(self.projection_dim, int) or self.projection_dim <= 0:
            raise ValueError(f"`projection_dim` must be a positive integer, got {self.projection_dim!r}.")
        if not math.isfinite(self.logit_scale_init):
            raise ValueError(f"`logit_scale_init` must be finite, got {self.logit_scale_init!r}.")


__all__ = ["AtrConfig", "SCORING_KINDS", "POOLING_KINDS"]

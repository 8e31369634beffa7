"""Configuration of the audio-text dual encoder."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec
from transformers.utils import logging

from .objectives.registry import default_logit_initialisation, default_scoring, validate_objective_config

logger = logging.get_logger(__name__)

SCORING_KINDS = ("cosine", "euclidean", "mahalanobis", "dot")
LOGIT_SCALE_FORMS = ("log", "raw")
"""How the scoring head stores its logit scale: ``"log"`` (CLIP: the factor is ``exp(logit_scale)``, capped at
100) or ``"raw"`` (PE-Audio: the parameter is the factor itself, 0 at its initialisation, which has no log form).
In both forms ``logit_scale_init`` is the log of the initial factor."""
MAX_RAW_LOGIT_SCALE_INIT = math.log(3.4028234663852886e38)
"""The largest ``logit_scale_init`` of a ``"raw"`` head: the log of float32's largest value (88.72), above which
``exp(logit_scale_init)`` is no float32 number."""
POOLING_KINDS = ("mean", "cls", "max", "pooler")
PROJECTION_KINDS = ("linear", "mlp")
AUDIO_WINDOW_ATTENTION_KINDS = ("eager", "sdpa")
CLAP_AUDIO_MODEL_TYPE = "clap_audio_model"
"""``CLAP_AUDIO_MODEL_TYPE``: the one audio tower with a choice of ``audio_window_attention``."""
DEFAULT_OBJECTIVE = {"name": "contrastive"}

FORMAT_VERSION = 3
"""Version of the saved ``config.json`` format. Files written before versioning (no ``format_version`` key) are
format 0 and read through :data:`MIGRATIONS`."""
SCORING_BEFORE_FORMAT_2 = "cosine"
"""What a config without ``scoring`` meant up to format 1; from format 2 it means the objective's paper metric."""


def _from_format_0(config_dict: dict[str, Any]) -> dict[str, Any]:
    """Format 0 -> 1: the fields are the same; format 1 only records its version."""
    return {**config_dict, "format_version": 1}


def _from_format_1(config_dict: dict[str, Any]) -> dict[str, Any]:
    """Format 1 -> 2: an absent ``scoring`` meant cosine; now it means the paper's metric (``iot``: Euclidean)."""
    scoring = config_dict.get("scoring")
    return {
        **config_dict,
        "scoring": SCORING_BEFORE_FORMAT_2 if scoring is None else scoring,
        "format_version": 2,
    }


LOGIT_SCALE_INIT_BEFORE_FORMAT_3 = math.log(1 / 0.07)
"""What a config without ``logit_scale_init`` meant up to format 2 (CLIP's); from format 3 the objective's paper
decides (:func:`~hf_atr.objectives.registry.default_logit_initialisation`)."""


def _from_format_2(config_dict: dict[str, Any]) -> dict[str, Any]:
    """Format 2 -> 3: the head stored a log scale, had no bias, and an absent ``logit_scale_init`` meant CLIP's.

    From format 3 an absent ``logit_bias`` / ``logit_scale_init`` means the objective's paper (``sigmoid``: a bias
    of −10, scale log 10), so the older meaning is written in.
    """
    return {
        **config_dict,
        "logit_scale_init": config_dict.get("logit_scale_init", LOGIT_SCALE_INIT_BEFORE_FORMAT_3),
        "logit_scale_form": config_dict.get("logit_scale_form", "log"),
        "logit_bias": config_dict.get("logit_bias", False),
        "format_version": 3,
    }


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    0: _from_format_0,
    1: _from_format_1,
    2: _from_format_2,
}
"""Format ``n`` -> the function that turns a saved format-``n`` dict into format ``n + 1``."""

_loading_saved_config: ContextVar[bool] = ContextVar("_loading_saved_config", default=False)


@strict
class AtrConfig(PreTrainedConfig):
    r"""Configuration of an :class:`~hf_atr.AtrDualEncoderModel`: any transformers audio backbone, any text
    backbone, projections to a shared space and a scoring head.

    Args:
        audio_config (`dict` or `PreTrainedConfig`):
            Configuration of the audio backbone (e.g. `ASTConfig`, `WhisperConfig` — its encoder is used,
            `ClapAudioConfig`). A dict needs a `model_type`; defaults to an AST.
        text_config (`dict` or `PreTrainedConfig`):
            Configuration of the text backbone (e.g. `BertConfig`, `XLMRobertaConfig`); defaults to BERT.
        projection_dim (`int`, defaults to 512):
            Size of the shared embedding space.
        audio_pooling / text_pooling (`str`, defaults to `"mean"`):
            How a sequence of hidden states becomes one vector: `"mean"` (masked mean), `"cls"` (first token),
            `"max"` (masked maximum over the sequence) or `"pooler"` (the backbone's `pooler_output`; CLAP's
            towers).
        text_pooling_normalize (`bool`, defaults to `False`):
            L2-normalise the pooled text vector before the projection (a sentence-transformers `Normalize`
            module after its `Pooling`).
        projection (`str`, defaults to `"linear"`):
            `"linear"`: one bias-free linear map per tower to `projection_dim`. `"mlp"`: CLAP's projection
            head, linear (with bias) → `projection_hidden_act` → linear (with bias), both to `projection_dim`.
        projection_hidden_act (`str`, defaults to `"relu"`):
            Activation between the two layers of the `"mlp"` projection (a `transformers.activations` name).
        projection_layer_norm (`bool`, defaults to `False`):
            A LayerNorm (eps 1e-6, with affine parameters) on the pooled vector before the projection: with a
            `"linear"` projection, PE-Audio's contrastive heads (`audio_head`, `text_audio_head`).
        separate_logit_scales (`bool`, defaults to `False`):
            `False`: one learnable logit scale. `True`: two, as CLAP (`logit_scale_t`, `logit_scale_a`):
            `logits_per_text` (text→audio) use the head's `logit_scale`, `logits_per_audio` (audio→text, and
            zero-shot classification) its `audio_logit_scale`.
        freeze_audio / freeze_text (`bool`, defaults to `False`):
            Keep a tower's weights fixed: its parameters do not require gradients (so the Trainer's optimizer
            holds no state for them), it runs in eval mode (dropout off, batch-norm statistics fixed) and
            without autograd.
        scoring (`str`, *optional*):
            Scoring head: `"cosine"` similarity, `"dot"` product of embeddings that are not L2-normalised
            (PE-Audio; no ground metric, so no OT objective), negative `"euclidean"` distance, or negative
            `"mahalanobis"` distance with a learnable PSD matrix (m-LTM Eq. 9). It is also the ground cost of
            the OT objectives. Defaults to the metric of the objective's paper
            (`hf_atr.objectives.registry.default_scoring`): `"euclidean"` for `iot`, `iot_partial` and `dart` on
            an IOT base (DART Eq. 4, m-LTM Eq. 9 with M = I), `"cosine"` for the contrastive objectives
            (`contrastive`, `triplet`, `kcl`, `cacl`, `random_language`, `ask`, `dart` on a contrastive base).
            For unit embeddings both rank identically; the OT objectives' plans and gradients differ.
        logit_scale_init (`float`, *optional*):
            Initial log inverse temperature of the scoring head: the factor starts at `exp(logit_scale_init)`
            in either `logit_scale_form` (a `"raw"` parameter starts at `exp(logit_scale_init)`, at most 88.72,
            float32's range). Defaults to the objective's paper: CLIP's log(1/0.07) = 2.6592, SigLIP's log 10 for
            `sigmoid`.
        logit_scale_form (`str`, defaults to `"log"`):
            How the head stores the scale: `"log"` (the factor is `exp(logit_scale)`, capped at 100) or `"raw"`
            (the parameter is the factor, uncapped: PE-Audio's `text_audio_logit_scale`, 0 at its
            initialisation, has no log form). A raw factor of 0 or less makes every logit the bias or ranks
            pairs opposite to their similarity; retrieval and evaluation rank by similarity and are unaffected.
        logit_bias (`bool`, *optional*):
            Whether the head adds a learnable bias to its logits (SigLIP Eq. 1's `b`, PE-Audio's
            `text_audio_logit_bias`). Defaults to the objective's paper: `True` for `sigmoid`, else `False`. A bias
            changes no ranking; only the sigmoid objective and the logits see it.
        audio_frame_rate (`float`, *optional*):
            Frames per second of the audio tower's `last_hidden_state` when the model embeds audio frame by frame
            (`AtrDualEncoderModel.get_audio_frame_features`): 25.0 for a model converted from a
            `PeAudioFrameLevelModel` checkpoint (48 kHz, one frame per 1920 samples). `None` (default): clip
            embeddings only.
        audio_window_attention (`str`, defaults to `"eager"`):
            How CLAP's HTS-AT audio tower computes its Swin window attention: `"eager"`, transformers'
            `ClapAudioSelfAttention` (explicit products and softmax), or `"sdpa"`,
            `torch.nn.functional.scaled_dot_product_attention` with the relative position bias and the
            shifted-window mask as its additive mask (`hf_atr.models.clap.window_attention`): the same outputs
            and gradients to float32 rounding, the same weights. Flash attention cannot take that dense mask; on a
            GPU the memory-efficient kernel can. `"eager"` stays the default until a GPU measurement decides.
            `"sdpa"` needs a CLAP audio tower (`ClapAudioConfig`).
        logit_bias_init (`float`, *optional*):
            Initial bias; defaults to the objective's paper (SigLIP's −10 for `sigmoid`, else 0).
        objective (`dict`, defaults to `{"name": "contrastive"}`):
            Training objective: a registered name and its hyperparameters, e.g.
            `{"name": "triplet", "margin": 0.2}`. See `hf_atr.objectives.available_objectives()`. A new
            config with an unknown objective raises; a saved one (`from_pretrained`, `from_dict`) whose
            objective is not installed here only warns, so the model still loads for search, and building
            its objective (training) is what fails.
        format_version (`int`):
            Version of the saved format (:data:`FORMAT_VERSION`); older files are migrated on load.

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
    logit_scale_init: float | None = None
    objective: dict[str, Any] | None = None
    text_pooling_normalize: bool = False
    projection: str = "linear"
    projection_hidden_act: str = "relu"
    separate_logit_scales: bool = False
    freeze_audio: bool = False
    freeze_text: bool = False
    projection_layer_norm: bool = False
    logit_scale_form: str = "log"
    logit_bias: bool | None = None
    logit_bias_init: float | None = None
    audio_frame_rate: float | None = None
    audio_window_attention: str = "eager"
    format_version: int = FORMAT_VERSION

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> AtrConfig:
        """Read a saved config: migrate older formats, and only warn when its objective is not installed."""
        token = _loading_saved_config.set(True)
        try:
            return super().from_dict(migrate_config_dict(config_dict), **kwargs)
        finally:
            _loading_saved_config.reset(token)

    def __post_init__(self, **kwargs):
        if self.objective is None:
            self.objective = dict(DEFAULT_OBJECTIVE)
        objective_installed = self._check_objective()
        if self.scoring is None:
            if not objective_installed:
                raise ValueError(
                    f"This config has no `scoring`, and its objective {self.objective!r} is not installed here "
                    "to say which metric its paper uses; set `scoring` to one of "
                    f"{SCORING_KINDS}."
                )
            self.scoring = default_scoring(self.objective)
        if self.scoring == "dot" and objective_installed and not _loading_saved_config.get():
            self._check_objective_needs_no_ground_metric()
        self._resolve_logit_initialisation(objective_installed)
        self._check_values()
        if "attn_implementation" not in kwargs:
            # PreTrainedConfig sets its sub-configs' attention implementation to this config's (None): a tower
            # built before this config, which reads the same sub-config object, would lose its own (and then
            # pair eager attention with an SDPA-style padding mask: wrong outputs for padded captions).
            kept = {
                name: sub_config._attn_implementation
                for name in ("audio_config", "text_config")
                if isinstance(sub_config := getattr(self, name), PreTrainedConfig)
                and sub_config._attn_implementation is not None
            }
            if kept:
                kwargs["attn_implementation"] = kept
        super().__post_init__(**kwargs)
        if self.audio_window_attention == "sdpa" and self.audio_config.model_type != CLAP_AUDIO_MODEL_TYPE:
            raise ValueError(
                "`audio_window_attention='sdpa'` applies to CLAP's HTS-AT audio tower (a ClapAudioConfig, model_type "
                f"{CLAP_AUDIO_MODEL_TYPE!r}); this audio tower's model_type is "
                f"{self.audio_config.model_type!r}. Leave `audio_window_attention` at 'eager'."
            )

    def _check_objective_needs_no_ground_metric(self) -> None:
        """Refuse an objective whose paper transports on a distance (the OT objectives) under ``"dot"`` scoring,
        which has none, before any training step would fail on it."""
        paper_metric = default_scoring(self.objective)
        if paper_metric != "cosine":
            raise ValueError(
                f"scoring='dot' (unnormalised embeddings, PE-Audio) has no ground metric, and objective "
                f"{self.objective['name']!r} transports on one (its paper's: {paper_metric!r}); train a dot-scored "
                "model with an objective on similarities (e.g. 'sigmoid', 'contrastive'), or choose scoring "
                "'cosine', 'euclidean' or 'mahalanobis'."
            )

    def _check_objective(self) -> bool:
        """Whether the objective can be built here: a new config raises when it cannot, a saved one warns."""
        try:
            validate_objective_config(self.objective)
        except ValueError as error:
            if not _loading_saved_config.get():
                raise
            logger.warning(
                f"{error} The model loads and encodes as usual; training it needs that objective installed."
            )
            return False
        return True

    def _resolve_logit_initialisation(self, objective_installed: bool) -> None:
        """Fill ``logit_scale_init``, ``logit_bias`` and ``logit_bias_init`` left unset from the objective's paper."""
        unset = [
            name
            for name in ("logit_scale_init", "logit_bias", "logit_bias_init")
            if getattr(self, name) is None
        ]
        if not unset:
            return
        if not objective_installed:
            raise ValueError(
                f"This config leaves {unset} unset, and its objective {self.objective!r} is not installed here to "
                "say how its paper initialises the logits; set them."
            )
        scale_init, bias_init = default_logit_initialisation(self.objective)
        if self.logit_scale_init is None:
            self.logit_scale_init = scale_init
        if self.logit_bias is None:
            self.logit_bias = bias_init is not None
        if self.logit_bias_init is None:
            self.logit_bias_init = 0.0 if bias_init is None else bias_init

    def _check_values(self) -> None:
        """Fail at construction with a plain ``ValueError`` that lists the allowed values."""
        if self.audio_frame_rate is not None and not (
            isinstance(self.audio_frame_rate, (int, float)) and self.audio_frame_rate > 0
        ):
            raise ValueError(
                f"`audio_frame_rate` must be a positive number of frames per second or None, got "
                f"{self.audio_frame_rate!r}."
            )
        if self.scoring not in SCORING_KINDS:
            raise ValueError(f"`scoring` must be one of {SCORING_KINDS}, got {self.scoring!r}.")
        for field_name in ("audio_pooling", "text_pooling"):
            if getattr(self, field_name) not in POOLING_KINDS:
                raise ValueError(
                    f"`{field_name}` must be one of {POOLING_KINDS}, got {getattr(self, field_name)!r}."
                )
        if self.audio_window_attention not in AUDIO_WINDOW_ATTENTION_KINDS:
            raise ValueError(
                f"`audio_window_attention` must be one of {AUDIO_WINDOW_ATTENTION_KINDS}, got "
                f"{self.audio_window_attention!r}."
            )
        if self.projection not in PROJECTION_KINDS:
            raise ValueError(f"`projection` must be one of {PROJECTION_KINDS}, got {self.projection!r}.")
        # transformers.activations loads its kernel hub (~1 s): read the config module without it.
        from transformers.activations import ACT2FN

        if self.projection_hidden_act not in ACT2FN:
            raise ValueError(
                f"`projection_hidden_act` must be a transformers activation name (e.g. 'relu', 'gelu'), "
                f"got {self.projection_hidden_act!r}."
            )
        if not isinstance(self.projection_dim, int) or self.projection_dim <= 0:
            raise ValueError(f"`projection_dim` must be a positive integer, got {self.projection_dim!r}.")
        for field_name in ("logit_scale_init", "logit_bias_init"):
            if not math.isfinite(getattr(self, field_name)):
                raise ValueError(f"`{field_name}` must be finite, got {getattr(self, field_name)!r}.")
        if self.logit_scale_form not in LOGIT_SCALE_FORMS:
            raise ValueError(
                f"`logit_scale_form` must be one of {LOGIT_SCALE_FORMS}, got {self.logit_scale_form!r}."
            )
        if self.logit_scale_form == "raw" and self.logit_scale_init > MAX_RAW_LOGIT_SCALE_INIT:
            raise ValueError(
                f"`logit_scale_init` is the log of the initial factor, which a 'raw' head stores as "
                f"exp(logit_scale_init); got {self.logit_scale_init!r}, whose exponential exceeds float32 "
                f"(at most {MAX_RAW_LOGIT_SCALE_INIT:.2f})."
            )


def register_auto_config() -> None:
    """Make ``AutoConfig`` resolve ``model_type="audio-text-retrieval"`` without remote code."""
    AutoConfig.register(AtrConfig.model_type, AtrConfig, exist_ok=True)


def migrate_config_dict(config_dict: dict[str, Any]) -> dict[str, Any]:
    """A saved config dict in the current :data:`FORMAT_VERSION` (a dict without a version is format 0)."""
    version = config_dict.get("format_version", 0)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"This config was saved in format {version!r}, but this hf-atr reads formats up to {FORMAT_VERSION}; "
            "upgrade hf-atr to load it."
        )
    while version < FORMAT_VERSION:
        config_dict = MIGRATIONS[version](config_dict)
        version += 1
    return config_dict


ATR_CONFIG_FIELDS = tuple(AtrConfig.__annotations__)
"""The options :class:`AtrConfig` adds to ``PreTrainedConfig`` (how ``from_*`` constructors route keyword arguments)."""

__all__ = [
    "ATR_CONFIG_FIELDS",
    "AtrConfig",
    "FORMAT_VERSION",
    "LOGIT_SCALE_FORMS",
    "POOLING_KINDS",
    "PROJECTION_KINDS",
    "SCORING_KINDS",
    "migrate_config_dict",
    "register_auto_config",
]

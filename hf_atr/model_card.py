"""Model cards for saved and pushed dual encoders, filled from the model and what training collected.

:func:`write_model_card` renders ``model_cards/atr_model_card.md`` with huggingface_hub's
``ModelCard.from_template``: backbones, projection, scoring head, the objective with its hyperparameters
and paper, training data and steps, the training curves (a PNG beside the card), the evaluation table (R@k
both ways, mAP@10, per language and MRV when multilingual), a usage snippet and the licence.
:class:`ModelCardCallback` collects the training side (as sentence-transformers' card callback does) into
``model.model_card_data``, which the card reads.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData
from transformers import TrainerCallback
from transformers.utils import logging

from .evaluation.tables import RETRIEVAL_COLUMNS, results_table
from .objectives.registry import get_objective_class, objective_parameters
from .plots.canvas import INSTALL_HINT, save_figure
from .plots.training import training_curves, training_curves_figure

logger = logging.get_logger(__name__)

TEMPLATE_PATH = Path(__file__).resolve().parent / "model_cards" / "atr_model_card.md"
CARD_DATA_ATTRIBUTE = "model_card_data"
"""Attribute of the model where :class:`ModelCardCallback` keeps what it collected."""
DEFAULT_LICENSE = "apache-2.0"
TRAINING_CURVES_FILE = "training_curves.png"
"""The training-curves figure, written beside ``README.md`` and shown by the card (so it renders on the Hub)."""

SCORING_DESCRIPTIONS = {
    "cosine": "cosine similarity × learned inverse temperature",
    "euclidean": "negative Euclidean distance × learned inverse temperature",
    "mahalanobis": "negative Mahalanobis distance with a learned PSD matrix (m-LTM Eq. 9) × learned inverse temperature",
}
_SPLIT_PREFIXES = ("eval_", "test_", "predict_")


def normalize_metric_names(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Drop the Trainer's ``eval_`` / ``test_`` prefixes and keep numeric values only."""
    normalized = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        name = next((key[len(prefix) :] for prefix in _SPLIT_PREFIXES if key.startswith(prefix)), key)
        normalized[name] = float(value)
    return normalized


def evaluation_table(metrics: Mapping[str, float]) -> str:
    """The card's evaluation section: the results table (in %, one row per language plus "avg") and its legend."""
    metrics = normalize_metric_names(metrics)
    if not any(key.split("/", 1)[0] in RETRIEVAL_COLUMNS for key in metrics):
        return "No evaluation results were recorded."
    lines = [
        results_table(metrics),
        "",
        "R@k: recall at k in % (a2t: any of the clip's captions in the top k); mAP@10 in %. "
        "t2a = text → audio, a2t = audio → text.",
    ]
    if "MRV" in metrics:
        lines += [
            "",
            f"MRV (mean rank variance across languages, ATRI Eq. 16; lower is more consistent): {metrics['MRV']:.2f}",
        ]
    return "\n".join(lines)


def build_model_card(
    model: Any,
    *,
    model_id: str | None = None,
    eval_results: Mapping[str, float] | None = None,
    training_data: str | None = None,
    eval_dataset: str | None = None,
    license: str | None = None,
    training_info: Mapping[str, Any] | None = None,
    training_curves: str = "",
) -> ModelCard:
    """The card of ``model`` (not written anywhere); see :func:`write_model_card` for the arguments.

    ``training_curves`` is Markdown placed after the training facts (:func:`write_model_card` draws the
    figure it shows).
    """
    collected = dict(getattr(model, CARD_DATA_ATTRIBUTE, None) or {})
    collected.update(training_info or {})
    training_data = training_data or collected.get("training_data")
    metrics = normalize_metric_names(
        eval_results if eval_results is not None else collected.get("eval_metrics") or {}
    )
    eval_dataset = eval_dataset or collected.get("eval_dataset") or training_data
    license = license or DEFAULT_LICENSE
    config = model.config
    objective = dict(config.objective)
    objective_name = objective.pop("name")
    description, citations = _objective_reference(objective_name)
    model_name = model_id or getattr(model, "name_or_path", "") or "hf-atr audio-text retrieval model"
    model_name = Path(model_name).name if os.path.isabs(str(model_name)) else str(model_name)
    audio_backbone, text_backbone = _backbone(model.audio_model), _backbone(model.text_model)

    card_data = ModelCardData(
        license=license,
        library_name="transformers",
        tags=["hf-atr", "audio-text-retrieval", objective_name],
        datasets=[training_data] if training_data else None,
        base_model=[name for name in (audio_backbone[1], text_backbone[1]) if name and "/" in name] or None,
        language=_caption_languages(metrics) or None,
        model_name=model_name,
        eval_results=_eval_results(metrics, eval_dataset) or None,
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE_PATH),
        model_name=model_name,
        model_id=model_id or "path/to/model",
        projection_dim=config.projection_dim,
        audio_backbone=audio_backbone[0],
        text_backbone=text_backbone[0],
        audio_hidden_size=config.audio_config.hidden_size,
        text_hidden_size=config.text_config.hidden_size,
        audio_pooling=config.audio_pooling,
        text_pooling=config.text_pooling,
        scoring_description=f"`{config.scoring}`: {SCORING_DESCRIPTIONS[config.scoring]}",
        objective_name=objective_name,
        objective_description=description,
        objective_hyperparameters=_hyperparameter_list(objective_name, objective),
        training_description=_training_description(training_data, collected),
        training_curves=training_curves,
        evaluation_table=_evaluation_section(metrics, eval_dataset),
        license_text=f"`{license}`",
        citation="\n".join(f"- {citation}" for citation in citations)
        or "No paper is registered for this objective.",
    )


def write_model_card(
    model: Any,
    save_directory: str | os.PathLike,
    *,
    model_id: str | None = None,
    eval_results: Mapping[str, float] | None = None,
    training_data: str | None = None,
    eval_dataset: str | None = None,
    license: str | None = None,
    training_info: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``README.md`` (the model card) for ``model`` into ``save_directory``; returns its path.

    When the model carries a training history (``log_history``, recorded by :class:`ModelCardCallback`), its
    curves are drawn into ``training_curves.png`` beside the card, which shows them (:func:`draw_training_curves`).

    Args:
        model: an :class:`~hf_atr.AtrDualEncoderModel`; what :class:`ModelCardCallback` stored on it
            (training data, last evaluation metrics, steps, hyperparameters, log history) is used unless
            overridden.
        model_id: the Hub repository id, used in the usage snippet and as the card's model name.
        eval_results: retrieval metrics (``retrieval_metrics`` keys, optionally ``eval_``-prefixed).
        training_data: name or Hub id of the training corpus.
        eval_dataset: name of the evaluation corpus (default: ``training_data``).
        license: licence identifier for the card's metadata (default ``apache-2.0``).
        training_info: extra training facts (``global_step``, ``epoch``, ``hyperparameters``) that take
            precedence over the collected ones.
    """
    path = Path(save_directory) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    history = {**(getattr(model, CARD_DATA_ATTRIBUTE, None) or {}), **(training_info or {})}.get(
        "log_history"
    )
    card = build_model_card(
        model,
        model_id=model_id,
        eval_results=eval_results,
        training_data=training_data,
        eval_dataset=eval_dataset,
        license=license,
        training_info=training_info,
        training_curves=draw_training_curves(model, history or [], path.parent) if history else "",
    )
    card.save(path)
    return path


def draw_training_curves(
    model: Any, log_history: Sequence[Mapping[str, Any]], directory: str | os.PathLike
) -> str:
    """Draw ``training_curves.png`` into ``directory`` from a Trainer's ``log_history``; returns the card's section.

    The figure (:mod:`hf_atr.plots.training`) shows the loss, the objective's logged terms
    (``<objective>/<key>``), what callbacks recorded (ASK's knowledge-base drift) and the evaluation metrics over
    optimizer steps. Returns ``""`` (no section, no file) when the history holds no training loss, and a note
    naming ``pip install 'hf-atr[plots]'`` when matplotlib is missing.
    """
    objective_name = model.config.objective["name"]
    curves = training_curves(log_history, objective_name)
    if curves.is_empty:
        return ""
    heading = "\n\n### Training curves\n\n"
    try:
        figure = training_curves_figure(curves, title=f"Training with the `{objective_name}` objective")
    except ImportError:
        logger.warning(
            f"The model card's training curves were not drawn: matplotlib is missing ({INSTALL_HINT})."
        )
        return (
            f"{heading}Not drawn where this card was written (matplotlib is not installed: `{INSTALL_HINT}`)."
        )
    save_figure(figure, Path(directory) / TRAINING_CURVES_FILE)
    lines = [
        f"![Training curves: loss, objective terms and evaluation over optimizer steps]({TRAINING_CURVES_FILE})",
        "",
        f"The training loss and the terms the `{objective_name}` objective logs (averaged between logging steps), "
        "over optimizer steps"
        + (
            ", and R@k and mAP@10 (%, mean over languages) at each evaluation during training (the trainer's "
            "evaluation set)."
            if curves.evaluation
            else "."
        ),
    ]
    if curves.constants:
        constants = ", ".join(f"`{name}` = {value:g}" for name, value in curves.constants.items())
        lines.append(f"Constant over the run (not drawn): {constants}.")
    return heading + "\n".join(lines)


class ModelCardCallback(TrainerCallback):
    """Collects what the model card needs during training into ``model.model_card_data``.

    Records the training data name, the Trainer's hyperparameters (learning rate, batch size, epochs,
    seed), the last evaluation metrics, the number of steps and epochs done and the Trainer's ``log_history``
    (for the training curves); a model saved at the end of training (``trainer.save_model()`` →
    ``save_pretrained``) then gets a card with them.

    Args:
        training_data: name or Hub id of the training corpus.
        eval_dataset: name of the evaluation corpus, if different.
    """

    def __init__(self, training_data: str | None = None, eval_dataset: str | None = None) -> None:
        self.training_data = training_data
        self.eval_dataset = eval_dataset

    def _card_data(self, model: Any) -> dict[str, Any]:
        data = getattr(model, CARD_DATA_ATTRIBUTE, None)
        if data is None:
            data = {}
            setattr(model, CARD_DATA_ATTRIBUTE, data)
        return data

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is None:
            return
        data = self._card_data(model)
        # The state's own list, which the Trainer and callbacks append to: the card draws it as it stands.
        data["log_history"] = state.log_history
        data["training_data"] = self.training_data
        data["eval_dataset"] = self.eval_dataset
        data["hyperparameters"] = {
            "learning_rate": args.learning_rate,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "world_size": args.world_size,
            "num_train_epochs": args.num_train_epochs,
            "max_steps": args.max_steps,
            "lr_scheduler_type": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
            "warmup_steps": args.warmup_steps,
            "weight_decay": args.weight_decay,
            "seed": args.seed,
        }

    def on_evaluate(self, args, state, control, model=None, metrics=None, **kwargs):
        if model is not None and metrics:
            data = self._card_data(model)
            data["eval_metrics"] = normalize_metric_names(metrics)
            data["log_history"] = state.log_history

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is not None:
            data = self._card_data(model)
            data["global_step"] = state.global_step
            data["epoch"] = state.epoch


def _backbone(backbone: Any) -> tuple[str, str]:
    """(``"<model_type> (<name or path>)"`` for the table, the name or path) of a backbone."""
    config = backbone.config
    name = str(getattr(config, "_name_or_path", "") or getattr(backbone, "name_or_path", "") or "")
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "encoder_layers", None)
    shape = (
        f"{layers} layers, hidden size {config.hidden_size}"
        if layers
        else f"hidden size {config.hidden_size}"
    )
    source = (
        f"[`{name}`](https://huggingface.co/{name}), "
        if name and "/" in name and not os.path.exists(name)
        else ""
    )
    return f"`{config.model_type}` ({source}{shape})", name


def _objective_reference(objective_name: str) -> tuple[str, tuple[str, ...]]:
    """(one-line description, citations) that the objective's class carries; a plugin that is not installed
    here has neither."""
    try:
        objective_class = get_objective_class(objective_name)
    except KeyError:
        return "a plugin objective (not installed where this card was written)", ()
    citation = objective_class.citation
    return objective_class.description or "a plugin objective", (citation,) if isinstance(
        citation, str
    ) else tuple(citation)


def _hyperparameter_list(objective_name: str, values: Mapping[str, Any]) -> str:
    """The objective's hyperparameters: those set in the config, then the defaults of the others."""
    try:
        defaults = {
            name: default
            for name, default in objective_parameters(objective_name).items()
            if default is not inspect.Parameter.empty and name not in values
        }
    except (KeyError, ValueError):
        defaults = {}
    lines = [f"- `{key}`: `{json.dumps(value, default=str)}`" for key, value in sorted(values.items())]
    lines += [
        f"- `{key}`: `{json.dumps(value, default=str)}` (default)" for key, value in sorted(defaults.items())
    ]
    return "\n".join(lines) or "- none"


def _training_description(training_data: str | None, collected: Mapping[str, Any]) -> str:
    lines = [f"- training data: {training_data or 'not recorded'}"]
    if collected.get("global_step") is not None:
        epoch = collected.get("epoch")
        lines.append(
            f"- steps: {collected['global_step']}" + (f" ({epoch:.2f} epochs)" if epoch is not None else "")
        )
    for key, value in sorted((collected.get("hyperparameters") or {}).items()):
        lines.append(f"- {key}: {value}")
    return "\n".join(lines)


def _evaluation_section(metrics: Mapping[str, float], eval_dataset: str | None) -> str:
    heading = f"On {eval_dataset}:\n\n" if eval_dataset and metrics else ""
    return heading + evaluation_table(metrics)


def _caption_languages(metrics: Mapping[str, float]) -> list[str]:
    return sorted({key.split("/", 1)[1] for key in metrics if "/" in key})


def _eval_results(metrics: Mapping[str, float], eval_dataset: str | None) -> list[EvalResult]:
    """Hub ``model-index`` entries for the averaged table metrics (needs a dataset name)."""
    if not eval_dataset:
        return []
    return [
        EvalResult(
            task_type="audio-text-retrieval",
            task_name="Audio-text retrieval",
            dataset_type=eval_dataset,
            dataset_name=eval_dataset,
            metric_type=name,
            metric_name=name,
            metric_value=round(metrics[name] if name == "MRV" else 100 * metrics[name], 2),
        )
        for name in (*RETRIEVAL_COLUMNS, "MRV")
        if name in metrics
    ]


__all__ = [
    "TRAINING_CURVES_FILE",
    "ModelCardCallback",
    "build_model_card",
    "draw_training_curves",
    "evaluation_table",
    "normalize_metric_names",
    "write_model_card",
]

"""Model cards for saved and pushed dual encoders, filled from the model and what training collected.

:func:`write_model_card` renders ``model_cards/atr_model_card.md`` with huggingface_hub's
``ModelCard.from_template``: backbones, projection, scoring head, the objective with its hyperparameters
and paper, training data (with its provenance: corpus, release, clips found against the official count, the
overlap filter and what it removed) and steps, the training curves (a PNG beside the card), the evaluation
table (R@k both ways, mAP@10, per language and MRV when multilingual) with the protocol behind it (split,
corpus release, clips evaluated against the official count, flagged when smaller, tie rule, relevance,
languages, how long clips were encoded, clips skipped as undecodable, the torch threads and CPU instruction set
the figures were computed with), a usage snippet and the licence. The metadata's ``base_model`` lists Hub ids
only (the towers' own, or those given), never a local path; ``license`` is written only when one was given.
:class:`ModelCardCallback` collects the training side (as sentence-transformers' card callback does) into
``model.model_card_data``, which the card reads; :func:`record_evaluation` stores an evaluation and its
protocol there.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData
from huggingface_hub.utils import HFValidationError, validate_repo_id
from transformers import TrainerCallback
from transformers.utils import logging

from .data.corpora import HELD_OUT_FILTER
from .data.overlap import OVERLAP_FILTER
from .evaluation.tables import RETRIEVAL_COLUMNS, results_table
from .objectives.registry import get_objective_class, objective_parameters
from .plots.canvas import INSTALL_HINT, save_figure
from .plots.training import training_curves, training_curves_figure

logger = logging.get_logger(__name__)

LICENSE_FIELDS = ("license", "license_name", "license_link")
TEMPLATE_PATH = Path(__file__).resolve().parent / "model_cards" / "atr_model_card.md"
CARD_DATA_ATTRIBUTE = "model_card_data"
"""Attribute of the model where :class:`ModelCardCallback` keeps what it collected."""
OTHER_LICENSE = "other"
"""The Hub's licence id for a licence it does not list, named by ``license_name`` and linked by ``license_link``."""
LICENSE_ID = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")
"""The form of the Hub's licence ids: SPDX ids in lower case (``apache-2.0``, ``cc-by-nc-4.0``), or ``other``."""
MAX_SKIPPED_LISTED = 5
"""How many of the clips an evaluation skipped as undecodable the card names (the rest are counted)."""
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
    license_name: str | None = None,
    license_link: str | None = None,
    base_model: Sequence[str] | None = None,
    training_info: Mapping[str, Any] | None = None,
    eval_protocol: Mapping[str, Any] | None = None,
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
    if eval_protocol is None and eval_results is None:
        eval_protocol = collected.get("eval_protocol")
    eval_dataset = eval_dataset or collected.get("eval_dataset") or training_data
    if license is None and license_name is None and license_link is None:
        license, license_name, license_link = (collected.get(key) for key in LICENSE_FIELDS)
    license = check_license(license, license_name, license_link)
    if base_model is None:
        base_model = collected.get("base_model")
    config = model.config
    objective = dict(config.objective)
    objective_name = objective.pop("name")
    description, citations = _objective_reference(objective_name)
    model_name = (
        model_id or hub_model_id(getattr(model, "name_or_path", None)) or "hf-atr audio-text retrieval model"
    )
    audio_backbone, audio_id = _backbone(model.audio_model)
    text_backbone, text_id = _backbone(model.text_model)
    base_models = list(dict.fromkeys(filter(None, (audio_id, text_id)))) if base_model is None else base_model
    for name in base_models:
        _check_base_model(name)

    card_data = ModelCardData(
        license=license,
        license_name=license_name if license == OTHER_LICENSE else None,
        license_link=license_link if license == OTHER_LICENSE else None,
        library_name="transformers",
        tags=["hf-atr", "audio-text-retrieval", objective_name],
        datasets=[training_data] if training_data else None,
        base_model=list(base_models) or None,
        language=_caption_languages(metrics) or None,
        model_name=model_name,
        eval_results=_eval_results(metrics, eval_dataset, eval_protocol) or None,
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE_PATH),
        model_name=model_name,
        model_id=model_id or "path/to/model",
        projection_dim=config.projection_dim,
        audio_backbone=audio_backbone,
        text_backbone=text_backbone,
        base_model_description=_base_model_description(base_models, given=base_model is not None),
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
        evaluation_table=_evaluation_section(metrics, eval_dataset, eval_protocol),
        license_text=_license_text(license, license_name, license_link),
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
    license_name: str | None = None,
    license_link: str | None = None,
    base_model: Sequence[str] | None = None,
    training_info: Mapping[str, Any] | None = None,
    eval_protocol: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``README.md`` (the model card) for ``model`` into ``save_directory``; returns its path.

    When the model carries a training history (``log_history``, recorded by :class:`ModelCardCallback`), its
    curves are drawn into ``training_curves.png`` beside the card, which shows them (:func:`draw_training_curves`).

    Args:
        model: an :class:`~hf_atr.AtrDualEncoderModel`; what :class:`ModelCardCallback`, :func:`record_evaluation`
            and :func:`record_sharing_terms` stored on it (training data and its provenance, the last evaluation
            with its protocol, steps, hyperparameters, log history, licence, base models) is used unless
            overridden.
        model_id: the Hub repository id, used in the usage snippet and as the card's model name.
        eval_results: retrieval metrics (``retrieval_metrics`` keys, optionally ``eval_``-prefixed).
        training_data: name or Hub id of the training corpus.
        eval_dataset: name of the evaluation corpus (default: ``training_data``); the card and the model-index
            add the number of clips evaluated from ``eval_protocol``.
        license: the Hub's licence id (an SPDX id in lower case such as ``apache-2.0`` or ``cc-by-nc-4.0``,
            or ``other`` with ``license_name`` and ``license_link``); ``None`` (the default, unless one was
            recorded) writes no licence claim, and the card's licence section says that one must be set before
            sharing. The terms of the training data and of the pretrained towers may restrict it.
        license_name, license_link: the id and the link (``LICENSE``, a file of the repository, or a URL) of
            a licence ``other``.
        base_model: Hub ids of the checkpoints the model starts from (the metadata's ``base_model``); an empty
            list says that it starts from random initialisation. Default: the towers' own names where they are
            Hub ids (a tower loaded from a local directory is named in prose only).
        training_info: extra training facts (``global_step``, ``epoch``, ``hyperparameters``,
            ``training_provenance``, ``training_audio``) that take precedence over the collected ones.
        eval_protocol: how ``eval_results`` were obtained (:attr:`RetrievalEvaluator.protocol
            <hf_atr.evaluation.evaluator.RetrievalEvaluator>`); with ``eval_results`` given and no protocol,
            the collected protocol (which belongs to the collected metrics) is not shown.

    Raises:
        ValueError: a licence that is not a licence id, ``other`` without its name and link, a name or link
            without ``other``, or a base model that is not a Hub id.
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
        license_name=license_name,
        license_link=license_link,
        base_model=base_model,
        training_info=training_info,
        eval_protocol=eval_protocol,
        training_curves=draw_training_curves(model, history or [], path.parent) if history else "",
    )
    card.save(path)
    return path


def check_license(
    license: str | None,
    license_name: str | None = None,
    license_link: str | None = None,
    *,
    prefix: str = "",
) -> str | None:
    """The licence id to write in a card (lower-cased), or ``None`` for no licence claim.

    Args:
        license: the Hub's licence id (SPDX ids in lower case: ``apache-2.0``, ``cc-by-nc-4.0``, ...), or
            ``other``.
        license_name, license_link: required with ``other`` (a short id such as ``my-license-1.0``, and
            ``LICENSE`` or a URL), refused without it.
        prefix: put before the argument names in messages (``"--"`` for ``hf-atr train``'s flags).

    Raises:
        ValueError: naming the argument and what it takes.
    """
    if license is None:
        if license_name or license_link:
            raise ValueError(
                f"{prefix}license_name and {prefix}license_link name a licence the Hub does not list: give "
                f"{prefix}license other with them."
            )
        return None
    identifier = str(license).strip().lower()
    if not LICENSE_ID.match(identifier):
        raise ValueError(
            f"{prefix}license {license!r} is not a licence id: give the Hub's id of the licence (an SPDX id such "
            f"as apache-2.0, mit or cc-by-nc-4.0), or other with {prefix}license_name and {prefix}license_link."
        )
    if identifier != OTHER_LICENSE:
        if license_name or license_link:
            raise ValueError(
                f"{prefix}license_name and {prefix}license_link go with {prefix}license other; {identifier!r} is "
                "a licence id of its own."
            )
        return identifier
    missing = [
        name for name, value in (("license_name", license_name), ("license_link", license_link)) if not value
    ]
    if missing:
        raise ValueError(
            f"{prefix}license other needs {' and '.join(prefix + name for name in missing)}: a short id of the "
            "licence (e.g. my-license-1.0) and a link to its text (LICENSE, a file of the repository, or a URL)."
        )
    if not LICENSE_ID.match(str(license_name)):
        raise ValueError(
            f"{prefix}license_name {license_name!r} must be a short id in lower case (letters, digits, '.', '-', "
            "'+'), e.g. my-license-1.0."
        )
    return identifier


def hub_model_id(name: Any) -> str | None:
    """``name`` when it reads as a Hub repository id (``owner/name``) and is no local path, else ``None``.

    A name without an owner (``bert-base-uncased``) is not taken for one: it may as well be a local folder.
    """
    if not name:
        return None
    name = str(name)
    if (
        name.count("/") != 1
        or name.startswith((".", "~", "/"))
        or os.path.isabs(name)
        or os.path.exists(name)
    ):
        return None
    try:
        validate_repo_id(name)
    except HFValidationError:
        return None
    return name


def record_sharing_terms(
    model: Any,
    *,
    license: str | None = None,
    license_name: str | None = None,
    license_link: str | None = None,
    base_model: Sequence[str] | None = None,
) -> None:
    """Store the licence and the base models for every card written afterwards (``save_pretrained``,
    ``push_to_hub``); checked as :func:`write_model_card` checks them.

    Raises:
        ValueError: as :func:`check_license`, or a base model that is not a Hub id.
    """
    license = check_license(license, license_name, license_link)
    for name in base_model or ():
        _check_base_model(name)
    data = card_data(model)
    data.update(license=license, license_name=license_name, license_link=license_link)
    if base_model is not None:
        data["base_model"] = list(base_model)


def card_data(model: Any) -> dict[str, Any]:
    """``model.model_card_data``, the facts its card is written from (created empty when absent)."""
    data = getattr(model, CARD_DATA_ATTRIBUTE, None)
    if data is None:
        data = {}
        setattr(model, CARD_DATA_ATTRIBUTE, data)
    return data


def record_evaluation(
    model: Any,
    metrics: Mapping[str, float],
    protocol: Mapping[str, Any] | None = None,
    eval_dataset: str | None = None,
) -> None:
    """Store an evaluation (metrics, its protocol, the evaluated data's name) for the model's card.

    Every card written afterwards (``save_pretrained``, ``push_to_hub``, :func:`write_model_card`) shows it.
    """
    data = card_data(model)
    data["eval_metrics"] = normalize_metric_names(metrics)
    data["eval_protocol"] = dict(protocol) if protocol is not None else None
    if eval_dataset is not None:
        data["eval_dataset"] = eval_dataset


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

    Records the training data name and provenance, the Trainer's hyperparameters (learning rate, batch size,
    epochs, seed), the last evaluation metrics, the number of steps and epochs done and the Trainer's
    ``log_history`` (for the training curves); a model saved at the end of training (``trainer.save_model()``
    → ``save_pretrained``) then gets a card with them.

    Args:
        training_data: name or Hub id of the training corpus.
        eval_dataset: name of the evaluation corpus, if different.
        training_provenance: the training data's provenance (:func:`~hf_atr.data.schema.corpus_provenance`:
            corpus, release, clips found, filters such as the overlap filter); :class:`~hf_atr.AtrTrainer`
            fills it from its training dataset when not given.
    """

    def __init__(
        self,
        training_data: str | None = None,
        eval_dataset: str | None = None,
        training_provenance: Mapping[str, Any] | None = None,
    ) -> None:
        self.training_data = training_data
        self.eval_dataset = eval_dataset
        self.training_provenance = training_provenance

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is None:
            return
        data = card_data(model)
        # The state's own list, which the Trainer and callbacks append to: the card draws it as it stands.
        data["log_history"] = state.log_history
        data["training_data"] = self.training_data
        data["eval_dataset"] = self.eval_dataset
        data["training_provenance"] = self.training_provenance
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
            data = card_data(model)
            data["eval_metrics"] = normalize_metric_names(metrics)
            data["log_history"] = state.log_history

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is not None:
            data = card_data(model)
            data["global_step"] = state.global_step
            data["epoch"] = state.epoch


def _backbone(backbone: Any) -> tuple[str, str | None]:
    """(``"<model_type> (<Hub link>, <shape>)"`` for the table, the tower's Hub id or ``None``).

    A tower loaded from a local directory is described by its type and shape, never by its path."""
    config = backbone.config
    name = str(getattr(config, "_name_or_path", "") or getattr(backbone, "name_or_path", "") or "")
    hub_id = hub_model_id(name)
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "encoder_layers", None)
    shape = (
        f"{layers} layers, hidden size {config.hidden_size}"
        if layers
        else f"hidden size {config.hidden_size}"
    )
    if hub_id:
        return f"`{config.model_type}` ([`{hub_id}`](https://huggingface.co/{hub_id}), {shape})", hub_id
    where = "; loaded from a local directory" if name else ""
    return f"`{config.model_type}` ({shape}{where})", None


def _check_base_model(name: str) -> None:
    if hub_model_id(name) != name:
        raise ValueError(
            f"base_model {name!r} is not a Hub repository id (owner/name) or is a local path; a card names base "
            "models by their Hub ids only."
        )


def _base_model_description(base_models: Sequence[str], *, given: bool) -> str:
    """The table's ``base model`` cell: the Hub links, random initialisation, or what is not known."""
    if base_models:
        return ", ".join(f"[`{name}`](https://huggingface.co/{name})" for name in base_models)
    if given:
        return "none: both towers start from random initialisation"
    return (
        "not recorded: no tower was loaded by a Hub id (towers from local directories are described above; "
        "`hf-atr train --base_model` or `write_model_card(base_model=...)` names their Hub ids)"
    )


def _license_text(license: str | None, license_name: str | None, license_link: str | None) -> str:
    if license is None:
        return (
            "No licence was set when this card was written, so none is claimed. Set one before sharing the model "
            "(`hf-atr train --license`, `write_model_card(license=...)`, or the `license` field of this card's "
            "metadata), taking the terms of the training data and of the pretrained towers into account: they "
            "may restrict it (ESC-50, for example, is licensed CC BY-NC)."
        )
    if license == OTHER_LICENSE:
        return f"`other`: [{license_name}]({license_link})"
    return f"`{license}`"


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
    lines += provenance_lines(collected.get("training_provenance"))
    if collected.get("training_audio"):
        lines.append(f"- long clips: {training_cut_description(collected['training_audio'])}")
    if collected.get("global_step") is not None:
        epoch = collected.get("epoch")
        lines.append(
            f"- steps: {collected['global_step']}" + (f" ({epoch:.2f} epochs)" if epoch is not None else "")
        )
    for key, value in sorted((collected.get("hyperparameters") or {}).items()):
        lines.append(f"- {key}: {value}")
    return "\n".join(lines)


def training_cut_description(training_audio: Mapping[str, Any]) -> str:
    """How the training clips met the extractor's window, from a ``training_audio`` record (see
    :func:`hf_atr.training.final_model.training_audio_record`): ``33 of 33 training clips were longer than the
    feature extractor's 2.00-s window and were cut to it (the first 2.00 s of each)``."""
    clips, cut = training_audio.get("clips"), training_audio.get("clips_cut_to_window")
    seconds = training_audio.get("window_seconds")
    window = (
        f"the feature extractor's {seconds:.2f}-s window" if seconds else "the feature extractor's window"
    )
    kept = training_audio.get("kept")
    if cut is None:
        what = "streamed training clips" if clips is None else f"{clips:,} training clips"
        return f"{what}; those longer than {window} were cut to it ({kept}); not counted"
    if not cut:
        return f"none of the {clips:,} training clips was longer than {window}"
    return f"{cut:,} of {clips:,} training clips were longer than {window} and were cut to it" + (
        f" ({kept})" if kept else ""
    )


def provenance_lines(provenance: Mapping[str, Any] | None) -> list[str]:
    """Card lines (Markdown list items) for a training dataset's provenance: each corpus split with its release
    and the clips found against the official count, the filters applied (the overlap filter and what it
    removed; a held-out test split), and ``overlap filter: not applied`` when none ran. Empty without a
    provenance."""
    if not provenance:
        return []
    parts = provenance.get("concatenated") or [provenance]
    filters = [record for part in parts for record in part.get("filters") or []]
    if "concatenated" in provenance:
        filters += provenance.get("filters") or []
    lines = [f"- source: {_split_description(part)}" for part in parts]
    for record in filters:
        lines.append(f"- {_filter_description(record)}")
    if not any(record.get("name") == OVERLAP_FILTER for record in filters):
        lines.append(
            "- overlap filter: not applied (the training clips were not checked against evaluation clips)"
        )
    return lines


def _split_description(part: Mapping[str, Any], counts: bool = True) -> str:
    """``Clotho `train` (Clotho v2.1 as distributed, official CSV): 3,839 clips found of 3,839 in the official
    split`` (without ``counts``: up to the colon)."""
    corpus = part.get("corpus") or "unnamed corpus"
    split = part.get("split")
    corpus_split = part.get("corpus_split")
    named = f"{corpus} `{split}`" if split else corpus
    if corpus_split and corpus_split != split:
        named += f" (the corpus's `{corpus_split}`)"
    details = ", ".join(str(part[key]) for key in ("official_release", "layout") if part.get(key))
    if details:
        named += f" ({details})"
    found = part.get("clips_found")
    numbers = []
    if found is not None:
        official = part.get("official_clips")
        numbers.append(
            f"{found:,} clips found of {official:,} in the official split"
            if official
            else f"{found:,} clips found"
        )
    if part.get("skipped"):
        numbers.append(f"{part['skipped']:,} clips or rows skipped when loading")
    return named + (": " + ", ".join(numbers) if numbers and counts else "")


def _filter_description(record: Mapping[str, Any]) -> str:
    if record.get("name") == OVERLAP_FILTER:
        by_source_id, by_content = record.get("removed_by_source_id", 0), record.get("removed_by_content", 0)
        reference = ", ".join(record.get("reference") or []) or "the reference data"
        text = (
            f"overlap filter (by {' and '.join(record.get('by') or [])}): removed {by_source_id + by_content:,} of "
            f"{record.get('clips_checked', 0):,} clips ({by_source_id:,} by source id, {by_content:,} by audio "
            f"content) that are clips of {reference} ({record.get('reference_clips', 0):,} reference clips)"
        )
        notes = []
        if record.get("without_source_id"):
            notes.append(f"{record['without_source_id']:,} clips had no source id")
        if record.get("unreadable"):
            notes.append(f"{record['unreadable']:,} could not be hashed and were kept")
        return text + ("; " + ", ".join(notes) if notes else "")
    if record.get("name") == HELD_OUT_FILTER:
        return (
            f"held out at random (seed {record.get('seed')}) as the test split: {record.get('held_out'):,} of "
            f"{record.get('clips_before'):,} clips; {record.get('clips_after'):,} remain here"
        )
    details = ", ".join(f"{key}: {value}" for key, value in record.items() if key != "name")
    return f"filter `{record.get('name', 'unnamed')}`" + (f" ({details})" if details else "")


def evaluated_set_name(eval_dataset: str, protocol: Mapping[str, Any] | None) -> str:
    """The evaluated data as the card and its model-index name it: ``eval_dataset`` and, when the protocol
    counts them, the clips evaluated (``"Clotho test (1,045 clips)"``)."""
    clips = (protocol or {}).get("clips")
    return f"{eval_dataset} ({clips:,} clips)" if clips is not None else eval_dataset


def _evaluation_section(
    metrics: Mapping[str, float], eval_dataset: str | None, protocol: Mapping[str, Any] | None = None
) -> str:
    heading = f"On {evaluated_set_name(eval_dataset, protocol)}:\n\n" if eval_dataset and metrics else ""
    section = heading + evaluation_table(metrics)
    if metrics and protocol:
        section = "\n\n".join(
            filter(None, [incomplete_test_set_warning(protocol), section, protocol_lines(protocol)])
        )
    return section


def incomplete_test_set_warning(protocol: Mapping[str, Any]) -> str | None:
    """A Markdown warning when fewer clips were evaluated than the official split holds, else ``None``."""
    official, clips = protocol.get("official_clips"), protocol.get("clips")
    if not official or clips is None or clips >= official:
        return None
    corpus = protocol.get("corpus") or {}
    release = corpus.get("official_release") or corpus.get("corpus") or "the official release"
    split = corpus.get("corpus_split") or corpus.get("split") or protocol.get("split") or "evaluation"
    return (
        f"> **Incomplete test set**: {clips:,} of the {official:,} clips of the {split} split of {release} were "
        f"evaluated ({official - clips:,} missing, skipped or filtered out); these figures are not comparable "
        "with results on the full split."
    )


def protocol_lines(protocol: Mapping[str, Any]) -> str:
    """The protocol behind an evaluation table (:attr:`RetrievalEvaluator.protocol`) as a Markdown list."""
    corpus = protocol.get("corpus")
    split = protocol.get("split")
    if corpus:
        parts = corpus.get("concatenated") or [corpus]
        data = " + ".join(_split_description(part, counts=False) for part in parts)
    else:
        data = f"split `{split}`" if split else "the evaluation set"
    clips = f"{protocol['clips']:,} clips evaluated" if protocol.get("clips") is not None else None
    if clips and protocol.get("official_clips"):
        clips += f" of {protocol['official_clips']:,} in the official split"
    if clips and corpus and corpus.get("skipped"):
        clips += f" ({corpus['skipped']:,} clips or rows skipped when loading)"
    languages = ", ".join(protocol.get("languages") or []) or "eng"
    if protocol.get("relevance") == "judgements":
        threshold = protocol.get("relevance_threshold")
        relevance = (
            f"relevance judgements `{protocol.get('relevance_file') or 'given in code'}`"
            + (f" (relevant when >= {threshold})" if threshold is not None else "")
            + f", {protocol.get('relevant_clips_per_caption', 0):.2f} relevant clips per caption; "
            f"{protocol.get('captions_without_judgement', 0):,} captions without judgement left out"
        )
    else:
        relevance = "each caption's own clip is its only relevant clip"
    scores = (
        f"entropic OT plan (m-LTM Eq. 5, reg {protocol.get('ot_reg')})"
        if protocol.get("scoring") == "ot_plan"
        else f"the model's scoring head ({protocol.get('similarity') or 'its similarity'})"
    )
    lines = [
        "Protocol:",
        "",
        f"- data: {data}" + (f"; {clips}" if clips else ""),
        f"- queries: {protocol.get('captions', 0):,} captions; languages: {languages}",
        f"- relevance: {relevance}",
        f"- ties: {protocol.get('tie_rule')}",
        f"- scores: {scores}; R@k at k = {', '.join(map(str, protocol.get('ks') or []))}, mAP at "
        f"{', '.join(map(str, protocol.get('map_cutoffs') or []))}",
        f"- long clips: {_window_description(protocol)}",
    ]
    if protocol.get("compute"):
        lines.append(f"- computed with: {compute_description(protocol['compute'])}")
    skipped = protocol.get("skipped_clips") or []
    if skipped:
        listed = "; ".join(
            f"`{item['audio_id']}` ({item['reason']})" for item in skipped[:MAX_SKIPPED_LISTED]
        )
        more = f" and {len(skipped) - MAX_SKIPPED_LISTED:,} more" if len(skipped) > MAX_SKIPPED_LISTED else ""
        lines.append(
            f"- skipped: {len(skipped):,} clips could not be decoded and were left out with their captions: "
            f"{listed}{more}"
        )
    return "\n".join(lines)


def compute_description(compute: Mapping[str, Any]) -> str:
    """``torch 2.13.0+cpu on cpu, 1 thread, CPU capability AVX2`` from a protocol's ``compute`` record
    (:func:`hf_atr.training.final_model.compute_record`), with why it matters."""
    threads = compute.get("threads")
    parts = [f"torch {compute.get('torch')} on {compute.get('device')}"]
    if threads is not None:
        parts.append(f"{threads} thread{'s' if threads != 1 else ''}")
    if compute.get("cpu_capability"):
        parts.append(f"CPU capability {compute['cpu_capability']}")
    return (
        ", ".join(parts)
        + " (another thread count or instruction set sums in another order, so a rerun there "
        "gives slightly different figures)"
    )


def _window_description(protocol: Mapping[str, Any]) -> str:
    """How the evaluated clips were encoded: whole by the model's own protocol (and how many it cut to its
    extractor's window), or window by window and pooled."""
    window = protocol.get("window_pooling")
    if window is None:
        cut = protocol.get("clips_cut_to_window")
        return (
            "each clip encoded in one forward pass of the inputs its processor prepares (the model's own "
            + (
                f"protocol; {cut:,} clips longer than the extractor's window were cut to it)"
                if cut
                else "protocol)"
            )
        )
    if window.get("window_seconds") is None:
        return f"{window.get('pooling')} pooling asked for; every clip fits one window (read whole)"
    return (
        f"{window.get('pooling')} of the normalised embeddings of {window['window_seconds']:g}-s windows every "
        f"{window['hop_seconds']:g} s (`{json.dumps(window, default=str)}`)"
    )


def _caption_languages(metrics: Mapping[str, float]) -> list[str]:
    return sorted({key.split("/", 1)[1] for key in metrics if "/" in key})


def _eval_results(
    metrics: Mapping[str, float], eval_dataset: str | None, protocol: Mapping[str, Any] | None = None
) -> list[EvalResult]:
    """Hub ``model-index`` entries for the averaged table metrics (needs a dataset name).

    The dataset is named as what was evaluated, with its size (``"Clotho test (1,045 clips)"``; a test split held
    out at random is named so by :func:`~hf_atr.data.schema.describe_dataset`); its type is the corpus, and its
    split is given only for a split of the corpus itself (not for clips held out of another split).
    """
    if not eval_dataset:
        return []
    corpus = (protocol or {}).get("corpus") or {}
    parts = corpus.get("concatenated") or [corpus]
    corpora = " + ".join(dict.fromkeys(part["corpus"] for part in parts if part.get("corpus")))
    held_out = any("held_out_from" in part for part in parts)
    split = None if held_out else (protocol or {}).get("split")
    return [
        EvalResult(
            task_type="audio-text-retrieval",
            task_name="Audio-text retrieval",
            dataset_type=corpora or eval_dataset,
            dataset_name=evaluated_set_name(eval_dataset, protocol),
            dataset_split=split,
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
    "card_data",
    "check_license",
    "compute_description",
    "draw_training_curves",
    "evaluated_set_name",
    "evaluation_table",
    "hub_model_id",
    "normalize_metric_names",
    "record_evaluation",
    "record_sharing_terms",
    "training_cut_description",
    "write_model_card",
]

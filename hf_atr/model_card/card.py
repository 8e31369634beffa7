"""The model card of a dual encoder, rendered from the model and what was recorded on it.

:func:`write_model_card` renders ``atr_model_card.md`` (beside this module) with huggingface_hub's
``ModelCard.from_template``: backbones, projection, scoring head, the objective with its hyperparameters
and paper, training data (with its provenance: corpus, release, clips found against the official count, the
overlap filter and what it removed) and steps, the training curves (a PNG beside the card,
:mod:`~hf_atr.model_card.figures`), the evaluation table (R@k both ways, mAP@10, per language and MRV when
multilingual) with the protocol behind it (:mod:`~hf_atr.model_card.protocol`), a usage snippet and the licence.
The metadata's ``base_model`` lists Hub ids only (the towers' own, or those given), never a local path;
``license`` is written only when one was given. What the card is written from is recorded on the model
(:mod:`~hf_atr.model_card.facts`). :func:`register_card_writer` makes every ``save_pretrained`` and
``push_to_hub`` write the card (:mod:`hf_atr.model_files`).
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..metrics.moments import MOMENT_METRIC_NAMES, MOMENT_RETRIEVAL_TASK
from ..metrics.tables import RETRIEVAL_COLUMNS, results_table
from ..model_files import MODEL_CARD_FILE, register_model_file
from ..objectives.registry import get_objective_class, objective_parameters
from .facts import (
    CARD_DATA_ATTRIBUTE,
    LICENSE_FIELDS,
    OTHER_LICENSE,
    check_base_model,
    check_license,
    hub_model_id,
    normalize_metric_names,
)
from .figures import draw_training_curves
from .protocol import (
    evaluated_set_name,
    incomplete_test_set_warning,
    protocol_lines,
    provenance_lines,
    training_cut_description,
)

TEMPLATE_PATH = Path(__file__).resolve().parent / "atr_model_card.md"
SCORING_DESCRIPTIONS = {
    "cosine": "cosine similarity × learned inverse temperature",
    "dot": "dot product of unnormalised embeddings × learned scale + learned bias (PE-Audio)",
    "euclidean": "negative Euclidean distance × learned inverse temperature",
    "mahalanobis": "negative Mahalanobis distance with a learned PSD matrix (m-LTM Eq. 9) × learned inverse temperature",
}


def evaluation_table(metrics: Mapping[str, float]) -> str:
    """The card's evaluation section: the results table (in %, one row per language plus "avg") and its legend."""
    metrics = normalize_metric_names(metrics)
    if all(name in metrics for name in MOMENT_METRIC_NAMES):
        return "\n".join(
            [
                "| " + " | ".join(MOMENT_METRIC_NAMES) + " |",
                "|" + "---:|" * len(MOMENT_METRIC_NAMES),
                "| " + " | ".join(f"{100 * metrics[name]:.2f}" for name in MOMENT_METRIC_NAMES) + " |",
                "",
                "Moment retrieval in %: R1@t, the top moment's IoU with an annotated one reaches t; mAP@t, detection "
                "AP at IoU t over at most 10 moments per query; mAP, averaged over IoU 0.50:0.05:0.95.",
            ]
        )
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
        check_base_model(name)

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

    When the model carries a training history (``log_history``, recorded by :class:`~hf_atr.ModelCardCallback`),
    its curves are drawn into ``training_curves.png`` beside the card, which shows them
    (:func:`~hf_atr.model_card.figures.draw_training_curves`).

    Args:
        model: an :class:`~hf_atr.AtrDualEncoderModel`; what :class:`~hf_atr.ModelCardCallback`,
            :func:`~hf_atr.model_card.facts.record_evaluation` and :func:`~hf_atr.model_card.facts.record_sharing_terms`
            stored on it (training data and its provenance, the last evaluation with its protocol, steps,
            hyperparameters, log history, licence, base models) is used unless overridden.
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
    path = Path(save_directory) / MODEL_CARD_FILE
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
    moments = (protocol or {}).get("task") == MOMENT_RETRIEVAL_TASK
    return [
        EvalResult(
            task_type="audio-moment-retrieval" if moments else "audio-text-retrieval",
            task_name="Audio moment retrieval" if moments else "Audio-text retrieval",
            dataset_type=corpora or eval_dataset,
            dataset_name=evaluated_set_name(eval_dataset, protocol),
            dataset_split=split,
            metric_type=name,
            metric_name=name,
            metric_value=round(metrics[name] if name == "MRV" else 100 * metrics[name], 2),
        )
        for name in (*(MOMENT_METRIC_NAMES if moments else RETRIEVAL_COLUMNS), "MRV")
        if name in metrics
    ]


def register_card_writer() -> None:
    """Have every saved model write its card (:data:`~hf_atr.model_files.MODEL_CARD_FILE`) with
    :func:`write_model_card`; the deferred registrations call this as soon as the model is imported
    (:mod:`hf_atr.auto_registration`)."""
    register_model_file(MODEL_CARD_FILE, write_model_card)


__all__ = [
    "SCORING_DESCRIPTIONS",
    "TEMPLATE_PATH",
    "build_model_card",
    "evaluation_table",
    "register_card_writer",
    "write_model_card",
]

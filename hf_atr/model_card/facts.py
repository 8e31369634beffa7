"""What a model card is written from: the facts recorded on the model, and the checks of what it may claim.

The model keeps them in ``model.model_card_data`` (:func:`card_data`): what training collected
(:class:`~hf_atr.training.callbacks.ModelCardCallback`), the last evaluation with its protocol
(:func:`record_evaluation`) and the sharing terms (:func:`record_sharing_terms`: licence and base models, checked
by :func:`check_license` and :func:`check_base_model`: the Hub's licence ids, base models by Hub id only).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from huggingface_hub.utils import HFValidationError, validate_repo_id

LICENSE_FIELDS = ("license", "license_name", "license_link")
CARD_DATA_ATTRIBUTE = "model_card_data"
"""Attribute of the model where :class:`~hf_atr.ModelCardCallback` keeps what it collected."""
OTHER_LICENSE = "other"
"""The Hub's licence id for a licence it does not list, named by ``license_name`` and linked by ``license_link``."""
LICENSE_ID = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")
"""The form of the Hub's licence ids: SPDX ids in lower case (``apache-2.0``, ``cc-by-nc-4.0``), or ``other``."""
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
        check_base_model(name)
    data = card_data(model)
    data.update(license=license, license_name=license_name, license_link=license_link)
    if base_model is not None:
        data["base_model"] = list(base_model)


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


def check_base_model(name: str) -> None:
    if hub_model_id(name) != name:
        raise ValueError(
            f"base_model {name!r} is not a Hub repository id (owner/name) or is a local path; a card names base "
            "models by their Hub ids only."
        )


__all__ = [
    "CARD_DATA_ATTRIBUTE",
    "card_data",
    "check_base_model",
    "check_license",
    "hub_model_id",
    "normalize_metric_names",
    "record_evaluation",
    "record_sharing_terms",
]

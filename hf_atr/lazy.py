"""Deferring imports to first use: a package's public names, and a transformers logger.

Importing costs the user on every call (STYLE.md). A package ``__init__`` maps its public names to the
submodules that define them and imports a submodule only when one of its names is first used, as
transformers' own ``__init__`` does; a light module (the data loaders) gets its transformers logger on its
first message, so that importing it does not import transformers.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .deprecation import moved_name


def lazy_attributes(
    package: str, names: Mapping[str, str], moved: Mapping[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``package`` (PEP 562).

    Args:
        package: the package's ``__name__``.
        names: public name -> the module that defines it, relative to ``package`` (``".modeling_atr"``).
        moved: names ``package`` no longer exports -> the absolute module that defines them now; using one
            warns with :class:`~hf_atr.deprecation.HfAtrDeprecationWarning` (:func:`hf_atr.deprecation.moved_name`)
            and ``__dir__`` leaves it out.

    Example::

        __getattr__, __dir__ = lazy_attributes(__name__, {"AtrConfig": ".configuration_atr"})
    """

    def __getattr__(name: str) -> Any:
        if moved and name in moved:
            return moved_name(package, name, moved[name])
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name], package), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this hook
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__


class DeferredLogger:
    """Stands for ``transformers.utils.logging.get_logger(name)``, which is imported on the first message."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: Any = None

    def __getattr__(self, attribute: str) -> Any:
        if self._logger is None:
            from transformers.utils import logging

            self._logger = logging.get_logger(self.name)
        return getattr(self._logger, attribute)


def get_logger(name: str) -> DeferredLogger:
    """A logger for ``name`` that imports transformers' logging only when it first logs."""
    return DeferredLogger(name)

"""The warning category of hf-atr's deprecations, and the old import paths of names that moved.

A deprecated name or argument of hf-atr warns with :class:`HfAtrDeprecationWarning`. It is a ``FutureWarning``
because Python shows those to every user by default (a ``DeprecationWarning`` is shown only for code run as
``__main__``). hf-atr's test suite turns the category into an error (``filterwarnings`` in ``pyproject.toml``), so a
module or a test of hf-atr still using a deprecated alias fails; the test of the alias itself expects the warning
with ``pytest.deprecated_call()``. Users silence it with
``warnings.filterwarnings("ignore", category=HfAtrDeprecationWarning)``.

Every public name has one import path, the module that defines it (or a package that lists it). A name that
moved keeps its old path for a while: the old module lists it in a table of moved names, and
:func:`moved_names` gives that module a ``__getattr__`` (PEP 562) that warns and returns the object from its new
home, so ``from hf_atr.encoding import encode_audio_clips`` still works and says where the name lives now.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


class HfAtrDeprecationWarning(FutureWarning):
    """A name or argument of hf-atr that a future version removes; the message names its replacement."""


def moved_name(module: str, name: str, new_home: str) -> Any:
    """``new_home.name``, after a :class:`HfAtrDeprecationWarning` that ``module.name`` moved there.

    Args:
        module: the old module's ``__name__`` (``"hf_atr.encoding"``).
        name: the public name that moved.
        new_home: the absolute name of the module that defines it now (``"hf_atr.audio_encoding"``).
    """
    warnings.warn(
        f"`{module}.{name}` moved to `{new_home}.{name}`; import it from there (the old path is deprecated and "
        "will be removed in a future version).",
        HfAtrDeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(new_home), name)


def moved_names(module: str, new_homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` (PEP 562) for the public names that moved out of ``module``.

    Args:
        module: the old module's ``__name__``.
        new_homes: moved name -> the absolute name of the module that defines it now.

    Example::

        MOVED_NAMES = {"encode_audio_clips": "hf_atr.audio_encoding"}
        __getattr__ = moved_names(__name__, MOVED_NAMES)
    """

    def __getattr__(name: str) -> Any:
        if name not in new_homes:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return moved_name(module, name, new_homes[name])

    return __getattr__


__all__ = ["HfAtrDeprecationWarning", "moved_name", "moved_names"]

"""The warning category of hf-atr's deprecations.

A deprecated name or argument of hf-atr warns with :class:`HfAtrDeprecationWarning`. It is a ``FutureWarning``
because Python shows those to every user by default (a ``DeprecationWarning`` is shown only for code run as
``__main__``). hf-atr's test suite turns the category into an error (``filterwarnings`` in ``pyproject.toml``), so a
module or a test of hf-atr still using a deprecated alias fails; the test of the alias itself expects the warning
with ``pytest.deprecated_call()``. Users silence it with
``warnings.filterwarnings("ignore", category=HfAtrDeprecationWarning)``.
"""

from __future__ import annotations


class HfAtrDeprecationWarning(FutureWarning):
    """A name or argument of hf-atr that a future version removes; the message names its replacement."""


__all__ = ["HfAtrDeprecationWarning"]

"""The local search page of ``hf-atr serve``: what a query returns (:mod:`hf_atr.app.results`, no gradio) and the
page that shows it (:mod:`hf_atr.app.search_page`, the only module that imports gradio, the optional extra
``hf-atr[app]``)."""

from __future__ import annotations

import importlib.util

APP_EXTRA = "pip install 'hf-atr[app]'"
"""How to get gradio, named in every message about its absence."""


def require_gradio() -> None:
    """Raise ``ImportError`` naming ``pip install 'hf-atr[app]'`` when gradio is not installed (without importing it)."""
    if importlib.util.find_spec("gradio") is None:
        raise ImportError(f"The search page needs gradio, which is not installed: {APP_EXTRA}")


__all__ = ["APP_EXTRA", "require_gradio"]

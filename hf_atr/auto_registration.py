"""Registration with transformers' Auto classes and pipeline registry, deferred until both sides are loaded.

``import hf_atr`` must stay light: Python imports ``hf_atr/__init__.py`` before any submodule, so
registering eagerly would load transformers' modeling code and our model into ``import hf_atr.data`` and
``hf-atr --help``. Instead an import hook watches five transformers modules and the hf-atr modules that
register with them, and the model with its card (:data:`REGISTRATIONS`); each registration runs as soon as both
of its modules have been imported, in either order:

- ``transformers.models.auto.configuration_auto`` + ``hf_atr.configuration_atr``: ``AutoConfig``;
- ``transformers.models.auto.modeling_auto`` + ``hf_atr.modeling_atr``: ``AutoModel``;
- ``transformers.models.auto.processing_auto`` + ``hf_atr.processing_atr``: ``AutoProcessor``;
- ``transformers.pipelines`` + ``hf_atr.pipelines.retrieval_pipeline``: ``pipeline("audio-text-retrieval")``;
- the PANNs backbones (``model_type="panns"``, :mod:`hf_atr.models.panns`): their configuration with
  ``AutoConfig``, their models with ``AutoModel`` and ``AutoModelForAudioClassification``, their feature
  extractor with ``AutoFeatureExtractor`` (``transformers.models.auto.feature_extraction_auto``);
- ``hf_atr.modeling_atr`` + ``hf_atr.model_card``: the card as a file written beside the weights
  (:mod:`hf_atr.model_files`), so that every saved model writes its card while the model imports none of it.

When transformers loads its side first (``from transformers import AutoModel`` after ``import hf_atr``, or
before it), the hf-atr module is imported right then, so the Auto class resolves our model types on its
first use; likewise the card is imported as soon as the model is. Once every registration has run, the hook removes itself from ``sys.meta_path``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Registration:
    """``function`` (``"module:name"`` of ours) registers ``ours`` with ``theirs``, once both are imported; ``ours``
    is imported as soon as ``theirs`` is."""

    theirs: str
    ours: str
    function: str


REGISTRATIONS = (
    Registration(
        "transformers.models.auto.configuration_auto",
        "hf_atr.configuration_atr",
        "hf_atr.configuration_atr:register_auto_config",
    ),
    Registration(
        "transformers.models.auto.modeling_auto",
        "hf_atr.modeling_atr",
        "hf_atr.modeling_atr:register_auto_classes",
    ),
    Registration(
        "transformers.models.auto.processing_auto",
        "hf_atr.processing_atr",
        "hf_atr.processing_atr:register_auto_processor",
    ),
    Registration(
        "transformers.pipelines",
        "hf_atr.pipelines.retrieval_pipeline",
        "hf_atr.pipelines.retrieval_pipeline:register_pipeline",
    ),
    Registration(
        "transformers.models.auto.configuration_auto",
        "hf_atr.models.panns.configuration_panns",
        "hf_atr.models.panns.configuration_panns:register_auto_config",
    ),
    Registration(
        "transformers.models.auto.modeling_auto",
        "hf_atr.models.panns.modeling_panns",
        "hf_atr.models.panns.modeling_panns:register_auto_models",
    ),
    Registration(
        "transformers.models.auto.feature_extraction_auto",
        "hf_atr.models.panns.feature_extraction_panns",
        "hf_atr.models.panns.feature_extraction_panns:register_auto_feature_extractor",
    ),
    Registration("hf_atr.modeling_atr", "hf_atr.model_card", "hf_atr.model_card:register_card_writer"),
)


class _RegistrationHook(importlib.abc.MetaPathFinder):
    """Finds the watched modules with the other finders and wraps their loaders to report when they are done."""

    def __init__(self) -> None:
        self.pending = list(REGISTRATIONS)
        self.watched = {
            name for registration in REGISTRATIONS for name in (registration.theirs, registration.ours)
        }
        self.loaded: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.watched:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ReportingLoader(spec.loader, self)
                return spec
        return None

    def module_loaded(self, name: str) -> None:
        """``name`` has been executed: run every registration that was waiting for it."""
        self.loaded.add(name)
        self.run_ready()

    def run_ready(self) -> None:
        for registration in list(self.pending):
            if registration not in self.pending or registration.theirs not in self.loaded:
                continue
            if registration.ours in self.loaded:
                self.pending.remove(registration)
                module_name, function_name = registration.function.split(":")
                getattr(sys.modules[module_name], function_name)()
            elif registration.ours not in sys.modules:
                # Theirs is loaded and ours is not: import ours now; its own report runs the registration.
                importlib.import_module(registration.ours)
        if not self.pending and self in sys.meta_path:
            sys.meta_path.remove(self)


class _ReportingLoader(importlib.abc.Loader):
    """Delegates to the real loader and tells the hook when the module has been executed."""

    def __init__(self, loader: Any, hook: _RegistrationHook) -> None:
        self.loader = loader
        self.hook = hook

    def create_module(self, spec: Any) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.hook.module_loaded(module.__name__)

    def __getattr__(self, attribute: str) -> Any:
        # get_source, get_filename, is_package, get_resource_reader, ... of the real loader.
        return getattr(self.loader, attribute)


def _fully_imported(name: str) -> bool:
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def install_registration_hook() -> None:
    """Register now what can be registered, and install the hook for the rest (once per process)."""
    if any(isinstance(finder, _RegistrationHook) for finder in sys.meta_path):
        return
    hook = _RegistrationHook()
    hook.loaded.update(name for name in hook.watched if _fully_imported(name))
    sys.meta_path.insert(0, hook)
    hook.run_ready()


__all__ = ["REGISTRATIONS", "Registration", "install_registration_hook"]

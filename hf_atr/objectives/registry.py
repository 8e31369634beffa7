"""The objective registry: every training loss is an :class:`Objective` plugin chosen by name.

Names resolve lazily, as transformers' auto mappings do: the built-in objectives are a table of
``name -> "module:Class"`` (:data:`BUILTIN_OBJECTIVES`), and third-party packages expose theirs through the
``hf_atr.objectives`` entry-point group::

    [project.entry-points."hf_atr.objectives"]
    my_loss = "my_package.losses:MyObjective"

Listing names (:func:`available_objectives`) imports nothing. Looking one up (:func:`get_objective_class`,
:func:`objective_parameters`, :func:`build_objective`, :func:`default_scoring`) imports that objective's
module only, which registers its classes with :func:`register_objective`; so checking a config's objective
costs one small module on top of torch (which transformers' config machinery has already loaded), never the
knowledge base, faiss or the other objectives. A class decorated with :func:`register_objective` in user code
is found by name as well. ``build_objective({"name": "contrastive", "temperature": 0.05})`` instantiates one.

Precision, for plugin authors: calling an objective (``objective(audio_embeds, text_embeds, ...)``) runs its
``forward`` with autocast disabled and with floating embeddings up-cast to at least float32, whatever the
caller's autocast state, and returns a loss of at least float32 (float64 inputs stay float64). Under
``TrainingArguments(bf16=True)`` every matmul would otherwise run in bfloat16, and OT costs and plans lose
about three significant digits. A plugin therefore writes ``forward`` in plain float32 and gets this for
free; it must not re-enable autocast inside.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, ClassVar

import torch
from torch import nn

ENTRY_POINT_GROUP = "hf_atr.objectives"

BUILTIN_OBJECTIVES: dict[str, str] = {
    "contrastive": "hf_atr.objectives.contrastive:ContrastiveObjective",
    "triplet": "hf_atr.objectives.triplet:TripletObjective",
    "iot": "hf_atr.objectives.mltm:InverseOTObjective",
    "iot_partial": "hf_atr.objectives.mltm:PartialInverseOTObjective",
    "dart": "hf_atr.objectives.dart:DartObjective",
    "random_language": "hf_atr.objectives.atri:RandomLanguageObjective",
    "kcl": "hf_atr.objectives.atri:KclObjective",
    "cacl": "hf_atr.objectives.atri:CaclObjective",
    "ask": "hf_atr.objectives.ask:AskObjective",
    "sigmoid": "hf_atr.objectives.sigmoid:SigmoidObjective",
}
"""Built-in objective name -> ``"module:Class"``; the module is imported when the name is first looked up."""

LOGIT_SCALE_NAMES = frozenset({"logit_scale", "audio_logit_scale"})
"""The scoring head's learnable logit scales (the second one only with ``separate_logit_scales``)."""
LOGIT_BIAS_NAME = "logit_bias"
"""The scoring head's learnable logit bias (only with ``AtrConfig.logit_bias``)."""
CLIP_LOGIT_SCALE_INIT = math.log(1 / 0.07)
"""CLIP's initial log inverse temperature (2.6592), the default of every objective whose paper says nothing else."""

_REGISTRY: dict[str, type[Objective]] = {}
"""Classes registered so far: built-ins whose module was imported, plugins, classes decorated in user code."""
_entry_points: dict[str, EntryPoint] | None = None
"""Installed plugins by name (read once, loaded on lookup)."""


@dataclass
class ObjectiveOutput:
    """What an objective returns.

    Args:
        loss: scalar tensor to back-propagate.
        logs: terms for the trainer's logs, e.g. ``{"loss_itc": loss_itc.detach()}``: detached 0-dim tensors
            (on the loss's device) or Python floats. :class:`~hf_atr.AtrTrainer` sums them on the device and reads
            them back only at logging steps, so an objective that logs tensors adds no host-device synchronisation
            to a training step; ``.item()`` or ``float()`` inside ``forward`` makes the host wait for the device
            in the middle of the step. Floats keep working (earlier versions required them).
    """

    loss: torch.Tensor
    logs: dict[str, torch.Tensor | float] = field(default_factory=dict)


def compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """The dtype an objective computes ``tensor`` in: at least float32 for floating tensors (float64 stays)."""
    if not tensor.is_floating_point():
        return tensor.dtype
    return torch.promote_types(tensor.dtype, torch.float32)


class Objective(nn.Module):
    """Base class of training objectives.

    Subclasses implement :meth:`forward` and take their hyperparameters as keyword arguments
    of ``__init__`` (the keys of ``config.objective`` other than ``name``). State that must survive
    a checkpoint (EMA statistics, learned temperatures) lives in registered buffers or parameters.

    Calling an objective runs :meth:`forward` in full precision (see :meth:`__call__`), so subclasses,
    plugins included, never see half-precision embeddings or an active autocast.

    Attributes:
        name: the registered name (set by :func:`register_objective`).
        description: one line for the model card: what the objective does.
        citation: the papers the objective implements, one reference per string (authors, title, venue,
            arXiv/OpenReview id), listed in model cards; empty for an objective without a paper. A plugin
            brings its own.
        paper_scoring: the scoring head (ground metric) the paper trains with, ``"cosine"`` unless it says
            otherwise; :class:`~hf_atr.AtrConfig` defaults ``scoring`` to it (see :meth:`scoring_in_paper`).
        paper_logit_scale_init / paper_logit_bias_init: how the paper initialises the head's log scale and its
            bias (``None``: no bias); :class:`~hf_atr.AtrConfig` defaults ``logit_scale_init``, ``logit_bias`` and
            ``logit_bias_init`` to them. CLIP's log(1/0.07) and no bias unless the paper says otherwise.
        reads_logit_bias: whether the loss depends on the head's logit bias (a softmax over a row does not);
            :class:`~hf_atr.AtrTrainer` freezes a bias no loss reads.
        training_view: the name of the view of the training clips the objective trains on, which
            :mod:`hf_atr.training` maps to a dataset, a collator and callbacks
            (:func:`~hf_atr.training.objective_setup.objective_training_setup`): ``"pairs"`` (the default: one
            caption per row, ``text_embeds`` ``(batch, dim)``), ``"all_languages"`` (each clip with its caption in
            all ``K`` training languages, ``(batch, K, dim)``), ``"english_and_random_language"`` (its English
            caption and one in a random other language, ``(batch, 2, dim)``), ``"random_language"`` (one caption
            in a random language per epoch, ``(batch, dim)``), ``"pairs_with_knowledge_base"`` (pairs, and a
            knowledge base of the training clips refreshed during training). A plugin names one of these or
            registers its own with :func:`hf_atr.training.register_training_view`.
        needs_whole_corpus: whether the objective, or its view, needs the whole training set at hand (per-epoch
            draws over every clip, a knowledge base of the training clips), so that it cannot train from a
            stream.
        accepts_negative_audio: whether ``forward`` scores unpaired audio rows (``batch["negative_audio"]``,
            :func:`~hf_atr.objectives.batch.split_negative_audio`) as negatives of every caption: moment training's
            crops outside the annotated moments (:mod:`hf_atr.training.moment_crops`). Calling an objective that
            does not with such rows raises ``ValueError``.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    citation: ClassVar[tuple[str, ...]] = ()
    paper_scoring: ClassVar[str] = "cosine"
    paper_logit_scale_init: ClassVar[float] = CLIP_LOGIT_SCALE_INIT
    paper_logit_bias_init: ClassVar[float | None] = None
    reads_logit_bias: ClassVar[bool] = True
    training_view: ClassVar[str] = "pairs"
    needs_whole_corpus: ClassVar[bool] = False
    accepts_negative_audio: ClassVar[bool] = False

    @classmethod
    def hyperparameters(cls) -> dict[str, Any]:
        """The hyperparameters the objective accepts (the keys of ``config.objective`` besides ``name``) with their
        defaults (``inspect.Parameter.empty`` if required): the keyword parameters of ``__init__``.

        An objective that forwards some of its hyperparameters as ``**kwargs`` names them by overriding this.
        """
        signature = inspect.signature(cls.__init__)
        return {
            parameter.name: parameter.default
            for parameter in list(signature.parameters.values())[1:]
            if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        }

    @classmethod
    def scoring_in_paper(cls, hyperparameters: Mapping[str, Any]) -> str:
        """The scoring head the paper uses with these hyperparameters (``config.objective`` without ``name``)."""
        return cls.paper_scoring

    def logit_scales_read(self) -> frozenset[str]:
        """Names of the scoring head's logit scales (``"logit_scale"``, ``"audio_logit_scale"``) this objective's
        loss depends on.

        :class:`~hf_atr.AtrTrainer` freezes the others, so that every trainable parameter gets a gradient and
        multi-process training runs with DDP's ``find_unused_parameters=False``. The default (both) keeps them
        trainable: a plugin that reads none says so by overriding this.
        """
        return LOGIT_SCALE_NAMES

    def logit_bias_read(self) -> bool:
        """Whether this objective's loss depends on the head's logit bias (:attr:`reads_logit_bias`)."""
        return self.reads_logit_bias

    def __call__(
        self, audio_embeds: torch.Tensor, text_embeds: torch.Tensor, **kwargs: Any
    ) -> ObjectiveOutput:
        """Run :meth:`forward` with autocast disabled on the embeddings' device and float32 (or float64) inputs.

        Returns the forward's :class:`ObjectiveOutput` with a loss of at least float32. The up-cast keeps the
        autograd graph, so gradients reach half-precision embeddings in their own dtype.
        """
        from .batch import NEGATIVE_AUDIO  # here: listing the objectives imports the registry alone

        negative = (kwargs.get("batch") or {}).get(NEGATIVE_AUDIO)
        if negative is not None and bool(torch.as_tensor(negative).any()) and not self.accepts_negative_audio:
            raise ValueError(
                f"Objective {self.name!r} does not score unpaired audio rows (batch['negative_audio'], the "
                "in-recording negatives of moment training); train moments with 'contrastive', or without "
                "negative crops."
            )
        device_type = audio_embeds.device.type
        no_autocast = (
            torch.autocast(device_type=device_type, enabled=False)
            if torch.amp.is_autocast_available(device_type)
            else contextlib.nullcontext()
        )
        with no_autocast:
            output = super().__call__(
                audio_embeds.to(compute_dtype(audio_embeds)),
                text_embeds.to(compute_dtype(text_embeds)),
                **kwargs,
            )
        output.loss = output.loss.to(compute_dtype(output.loss))
        return output

    def forward(
        self,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        *,
        batch: Mapping[str, Any] | None = None,
        model: nn.Module | None = None,
    ) -> ObjectiveOutput:
        """Compute the loss.

        Args:
            audio_embeds: ``(batch, dim)`` audio embeddings from the model.
            text_embeds: ``(batch, dim)`` caption embeddings, or ``(batch, K, dim)`` for K languages.
            batch: batch metadata (its entries are named in :mod:`hf_atr.objectives.batch`);
                ``batch["audio_ids"]`` (list of ``batch`` strings) marks rows that are the same clip, which must
                never be treated as negatives of each other.
            model: the :class:`~hf_atr.AtrDualEncoderModel`, for its scoring head (temperature,
                ground metric).
        """
        raise NotImplementedError


def register_objective(name: str) -> Callable[[type[Objective]], type[Objective]]:
    """Class decorator that registers an :class:`Objective` subclass under ``name``."""

    def decorator(objective_class: type[Objective]) -> type[Objective]:
        if not (inspect.isclass(objective_class) and issubclass(objective_class, Objective)):
            raise TypeError(
                f"@register_objective({name!r}) must decorate an Objective subclass, got {objective_class!r}"
            )
        location = f"{objective_class.__module__}:{objective_class.__qualname__}"
        existing = _REGISTRY.get(name)
        reserved = BUILTIN_OBJECTIVES.get(name)
        if (existing is not None and existing is not objective_class) or reserved not in (None, location):
            taken_by = reserved or f"{existing.__module__}:{existing.__qualname__}"
            raise ValueError(f"An objective named {name!r} is already registered ({taken_by}).")
        objective_class.name = name
        _REGISTRY[name] = objective_class
        return objective_class

    return decorator


def _installed_plugins() -> dict[str, EntryPoint]:
    """Entry points of the ``hf_atr.objectives`` group by name, read from package metadata (nothing imported)."""
    global _entry_points
    if _entry_points is None:
        _entry_points = {
            entry_point.name: entry_point for entry_point in entry_points(group=ENTRY_POINT_GROUP)
        }
    return _entry_points


def available_objectives() -> list[str]:
    """Sorted names of every objective: built-in, installed plugins, and classes registered in this process."""
    return sorted({*BUILTIN_OBJECTIVES, *_installed_plugins(), *_REGISTRY})


def get_objective_class(name: str) -> type[Objective]:
    """The class registered under ``name``, importing its module on first use; a :class:`KeyError` lists the
    registered names."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in BUILTIN_OBJECTIVES:
        module_name, class_name = BUILTIN_OBJECTIVES[name].split(":")
        return register_objective(name)(getattr(importlib.import_module(module_name), class_name))
    if name in _installed_plugins():
        return register_objective(name)(_installed_plugins()[name].load())
    raise KeyError(f"Unknown objective {name!r}. Registered objectives: {', '.join(available_objectives())}.")


def objective_parameters(name: str) -> dict[str, Any]:
    """The hyperparameters ``name`` accepts, with their defaults (``inspect.Parameter.empty`` if required)."""
    return get_objective_class(name).hyperparameters()


def check_known_hyperparameters(name: str, given: Iterable[str], accepted: Iterable[str]) -> None:
    """Raise a :class:`ValueError` naming the keys of ``given`` that objective ``name`` does not accept."""
    accepted = sorted(accepted)
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise ValueError(
            f"Objective {name!r} got unknown hyperparameter(s) {unknown}; it accepts {accepted}."
        )


def validate_objective_config(objective_config: Mapping[str, Any]) -> None:
    """Raise a :class:`ValueError` naming the problem if ``objective_config`` cannot build an objective."""
    if not isinstance(objective_config, Mapping) or "name" not in objective_config:
        raise ValueError(
            f"`objective` must be a dict with a 'name' key, e.g. {{'name': 'contrastive'}}; got {objective_config!r}. "
            f"Registered objectives: {', '.join(available_objectives())}."
        )
    name = objective_config["name"]
    try:
        accepted = objective_parameters(name)
    except KeyError as error:
        raise ValueError(error.args[0]) from None
    check_known_hyperparameters(name, set(objective_config) - {"name"}, accepted)


def default_scoring(objective_config: Mapping[str, Any]) -> str:
    """The scoring head the paper of ``objective_config``'s objective trains with (``AtrConfig.scoring``'s default).

    ``{"name": "iot"}`` gives ``"euclidean"`` (m-LTM Eq. 9 with ``M = I``, DART Eq. 4); contrastive objectives
    give ``"cosine"``.
    """
    validate_objective_config(objective_config)
    hyperparameters = {key: value for key, value in objective_config.items() if key != "name"}
    return get_objective_class(objective_config["name"]).scoring_in_paper(hyperparameters)


def default_logit_initialisation(objective_config: Mapping[str, Any]) -> tuple[float, float | None]:
    """``(log scale, bias or None)`` the paper of ``objective_config``'s objective initialises its logits with.

    ``{"name": "sigmoid"}`` gives ``(log 10, -10)`` (SigLIP §3.2); the others CLIP's ``(log(1/0.07), None)``.
    """
    validate_objective_config(objective_config)
    objective_class = get_objective_class(objective_config["name"])
    return objective_class.paper_logit_scale_init, objective_class.paper_logit_bias_init


def build_objective(config: Any) -> Objective:
    """Instantiate the objective described by ``config``.

    Args:
        config: an :class:`~hf_atr.AtrConfig` (its ``objective`` dict is used), or the dict itself,
            e.g. ``{"name": "triplet", "margin": 0.2}``.
    """
    objective_config = getattr(config, "objective", config)
    validate_objective_config(objective_config)
    hyperparameters = {key: value for key, value in objective_config.items() if key != "name"}
    return get_objective_class(objective_config["name"])(**hyperparameters)

"""The model of ``hf-atr train``: where fine-tuning starts (``StartingPointArguments``), the objective it trains
with (``ObjectiveArguments``) and what its card says about sharing it (``CardArguments``), as dataclasses that
transformers' ``HfArgumentParser`` reads (:mod:`~hf_atr.commands.train.train_arguments`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...models.checkpoint_families import CHECKPOINT_FAMILIES
from .option_values import json_object


def with_checkpoint_arguments(cls: type) -> type:
    """Give the starting-point class, before ``@dataclass`` reads it, one ``str | None`` field per row of
    :data:`~hf_atr.models.checkpoint_families.CHECKPOINT_FAMILIES` (``--clap_model``, ``--pe_audio_model``, ...)
    after ``model_name_or_path``, its help the row's description: a new family needs no line here."""
    annotations = {}
    for name, kind in cls.__annotations__.items():
        annotations[name] = kind
        if name == "model_name_or_path":
            for key, family in CHECKPOINT_FAMILIES.items():
                annotations[family.argument] = "str | None"
                help_text = (
                    f"{family.description}; converted with AtrDualEncoderModel.from_checkpoint({key!r})"
                )
                setattr(cls, family.argument, field(default=None, metadata={"help": help_text}))
    cls.__annotations__ = annotations
    return cls


@dataclass
@with_checkpoint_arguments
class StartingPointArguments:
    """Where fine-tuning starts: exactly one of ``model_name_or_path``, a checkpoint of a family
    (:func:`with_checkpoint_arguments`: ``clap_model``, ``pe_audio_model``, ...), or ``audio_model`` with
    ``text_model``."""

    _argument_group_name = (
        "starting point (one of --model_name_or_path, "
        + "".join(f"--{family.argument}, " for family in CHECKPOINT_FAMILIES.values())
        + "--audio_model + --text_model)"
    )

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "an hf-atr model directory (saved with its processor) to fine-tune"}
    )
    audio_model: str | None = field(
        default=None,
        metadata={"help": "audio tower directory with its feature extractor (AST, Whisper, PANNs, ...), "
                  "combined with --text_model by from_audio_text_pretrained"},
    )  # fmt: skip
    text_model: str | None = field(
        default=None,
        metadata={"help": "text tower directory with its tokenizer (BERT, RoBERTa, ...), or a "
                  "sentence-transformers directory (its pooling and normalisation are kept)"},
    )  # fmt: skip
    projection_dim: int | None = field(
        default=None, metadata={"help": "size of new projections (--audio_model/--text_model; unset: 512)"}
    )
    audio_pooling: str | None = field(
        default=None, metadata={"help": "audio tower pooling for --audio_model (mean, cls, pooler, ...)"}
    )
    text_pooling: str | None = field(
        default=None, metadata={"help": "text tower pooling for --text_model (mean, cls, pooler, ...)"}
    )
    scoring: str | None = field(
        default=None,
        metadata={
            "help": "scoring head: cosine, euclidean or mahalanobis (unset: cosine, or a CLAP checkpoint's)"
        },
    )
    freeze_audio: bool = field(
        default=False, metadata={"help": "freeze the audio tower (its projection still trains)"}
    )
    freeze_text: bool = field(
        default=False, metadata={"help": "freeze the text tower (its projection still trains)"}
    )


@dataclass
class ObjectiveArguments:
    """The training objective and its hyperparameters."""

    _argument_group_name = "objective"

    objective: str | None = field(
        default=None,
        metadata={"help": "registered objective (contrastive, triplet, iot, iot_partial, dart, random_language, kcl, "
                  "cacl, ask, or a plugin); default: the starting model's, else contrastive"},
    )  # fmt: skip
    objective_args: dict | str | None = field(
        default=None,
        metadata={"help": 'the objective\'s hyperparameters as a JSON object, e.g. \'{"temperature": 0.05}\'; '
                  "with no --objective they update the starting model's objective"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        self.objective_args = json_object(self.objective_args, "--objective_args")


@dataclass
class CardArguments:
    """What the model card says about sharing the model: its licence and the checkpoints it starts from."""

    _argument_group_name = "model card"

    license: str | None = field(
        default=None,
        metadata={"help": "the licence of the trained model, as the Hub's id of it (an SPDX id in lower case: "
                  "apache-2.0, mit, cc-by-nc-4.0, ...) or other with --license_name and --license_link. The terms "
                  "of the training data and of the towers may restrict it (ESC-50 is CC BY-NC). Unset: the card "
                  "claims no licence and says that one must be set before sharing"},
    )  # fmt: skip
    license_name: str | None = field(
        default=None, metadata={"help": "--license other: a short id of the licence, e.g. my-license-1.0"}
    )
    license_link: str | None = field(
        default=None,
        metadata={"help": "--license other: LICENSE (a file of the model's repository) or a URL to its text"},
    )
    base_model: list[str] = field(
        default_factory=list,
        metadata={"help": "Hub ids (owner/name) of the checkpoints the model starts from, for the card's "
                  "base_model, e.g. the ids of the towers given as local copies; unset: the towers' own names "
                  "where they are Hub ids (a local path is never written)"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        # The card's module, imported once the flags parse.
        from ...model_card.facts import check_license, hub_model_id

        if isinstance(self.base_model, str):  # a YAML scalar for a list
            self.base_model = [self.base_model]

        self.license = check_license(self.license, self.license_name, self.license_link, prefix="--")
        for name in self.base_model:
            if hub_model_id(name) != name:
                raise ValueError(
                    f"--base_model {name}: not a Hub repository id (owner/name), or a local path; the card names "
                    "base models by their Hub ids only."
                )


__all__ = ["CardArguments", "ObjectiveArguments", "StartingPointArguments", "with_checkpoint_arguments"]

"""Model cards: rendering (:mod:`~hf_atr.model_card.card`), what they are written from
(:mod:`~hf_atr.model_card.facts`), the protocol prose (:mod:`~hf_atr.model_card.protocol`) and the training curves
(:mod:`~hf_atr.model_card.figures`).

The card reads a model and never imports one: :func:`register_card_writer` registers :func:`write_model_card` as
a file written beside the weights (:mod:`hf_atr.model_files`), which the deferred registrations do as soon as the
model is imported, so ``save_pretrained`` and ``push_to_hub`` write it. The training side of the card,
:class:`~hf_atr.ModelCardCallback`, lives with the other callbacks in :mod:`hf_atr.training.callbacks`. Names
resolve on first use, so recording facts (:mod:`~hf_atr.model_card.facts`) imports no rendering.
"""

from ..lazy import lazy_attributes

_LAZY_NAMES = {
    "build_model_card": ".card",
    "evaluation_table": ".card",
    "register_card_writer": ".card",
    "write_model_card": ".card",
    "card_data": ".facts",
    "check_license": ".facts",
    "hub_model_id": ".facts",
    "normalize_metric_names": ".facts",
    "record_evaluation": ".facts",
    "record_sharing_terms": ".facts",
    "TRAINING_CURVES_FILE": ".figures",
    "draw_training_curves": ".figures",
    "compute_description": ".protocol",
    "evaluated_set_name": ".protocol",
    "training_cut_description": ".protocol",
}
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY_NAMES)

__all__ = sorted(_LAZY_NAMES)

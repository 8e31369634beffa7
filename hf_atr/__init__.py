"""hf-atr: audio-text retrieval for the Hugging Face stack.

Every public name resolves on first use (``from hf_atr import AtrTrainer`` imports the trainer then, not
before), so ``import hf_atr``, ``import hf_atr.data`` and ``hf-atr --help`` stay light. Importing the
package also arranges the registration of the ``audio-text-retrieval`` model type with ``AutoConfig``,
``AutoModel``, ``AutoProcessor`` and ``pipeline()``, and of the PANNs backbones (``model_type="panns"``) with
``AutoConfig``, ``AutoModel``, ``AutoModelForAudioClassification`` and ``AutoFeatureExtractor`` (no
``trust_remote_code`` needed); each happens as soon as transformers loads those, before or after this
import (:mod:`hf_atr.auto_registration`).
"""

from .auto_registration import install_registration_hook
from .lazy import lazy_attributes

__version__ = "0.1.0"

_LAZY_NAMES = {
    "AtrConfig": ".configuration_atr",
    "AtrDualEncoderModel": ".modeling_atr",
    "AtrOutput": ".modeling_atr",
    "AtrScoringHead": ".scoring_head",
    "AtrProcessor": ".processing_atr",
    "AudioTextRetrievalPipeline": ".pipelines.retrieval_pipeline",
    "EmbeddingIndex": ".pipelines.index",
    "KnowledgeBase": ".knowledge.knowledge_base",
    "encode_audio": ".audio_encoding",
    "encode_text": ".encoding",
    "RetrievalEvaluator": ".evaluation.evaluator",
    "ZeroShotEvaluator": ".evaluation.zero_shot",
    "MomentEvaluator": ".evaluation.moment_evaluator",
    "Objective": ".objectives.registry",
    "available_objectives": ".objectives.registry",
    "build_objective": ".objectives.registry",
    "register_objective": ".objectives.registry",
    "AtrTrainer": ".training.trainer",
    "AtrDataCollator": ".training.collator",
    "WaveformCollator": ".training.waveform_collator",
    "register_training_view": ".training.objective_setup",
    "load_corpus": ".data.corpora",
    "load_audio_text_shards": ".data.shards",
    "load_moments": ".data.moments",
    "synthesize_moments": ".data.moment_synthesis",
    "register_tower": ".towers",
    "retrieval_metrics": ".metrics.retrieval",
    "retrieval_metrics_from_embeddings": ".metrics.retrieval",
    "load_retrieval_metric": ".metrics.retrieval",
    "moment_retrieval_metrics": ".metrics.moments",
    "load_moment_retrieval_metric": ".metrics.moments",
    "push_to_hub": ".pipelines.sharing",
    "ModelCardCallback": ".training.callbacks",
    "write_model_card": ".model_card.card",
    "MomentProposalConfig": ".moments.proposal",
    "SimilarityCurve": ".moments.curve",
    "propose_moments": ".moments.proposal",
}
MOVED_NAMES = {
    "StreamingPairs": "hf_atr.training",
    "featurize_waveforms": "hf_atr.training",
    "moment_recordings": "hf_atr.data",
}
"""Names the package no longer exports -> the sub-package that does; ``hf_atr.<name>`` warns
(:class:`~hf_atr.deprecation.HfAtrDeprecationWarning`)."""
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY_NAMES, MOVED_NAMES)

__all__ = sorted(_LAZY_NAMES)

install_registration_hook()

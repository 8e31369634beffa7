"""Datasets in the shared schema (see :mod:`hf_atr.data.schema`): corpus loaders and the embedded synthcaps."""

from .audio import check_audio_file, decode_audio, encode_wav, resample
from .audio_arrays import AudioDecodeError
from .audio_text_folder import load_audio_text_folder
from .audiocaps import load_audiocaps
from .caption_list import CaptionList, read_caption_list
from .clotho import load_clotho
from .corpora import CORPUS_LOADERS, combine_splits, hold_out_test_split, load_corpus
from .corpus_utils import CorpusFormatError, MetadataEncodingError
from .esc50 import class_prompts, load_esc50
from .language_codes import normalize_language_code
from .moment_synthesis import synthesize_moments
from .moments import load_moment_splits, load_moments, moment_recordings
from .multilingual import load_translations
from .relevance import load_relevance_judgements
from .schema import LANGUAGES, atr_features, corpus_provenance
from .shards import load_audio_text_shards, write_audio_text_shards
from .synthcaps import load_synthcaps, write_audiocaps_layout, write_clotho_layout, write_esc50_layout
from .synthcaps_audio import SOUND_EVENTS, generate_clip
from .synthcaps_grammar import event_phrase
from .wavcaps import load_wavcaps

__all__ = [
    "CORPUS_LOADERS",
    "LANGUAGES",
    "SOUND_EVENTS",
    "AudioDecodeError",
    "CaptionList",
    "CorpusFormatError",
    "MetadataEncodingError",
    "atr_features",
    "check_audio_file",
    "class_prompts",
    "combine_splits",
    "corpus_provenance",
    "decode_audio",
    "encode_wav",
    "event_phrase",
    "generate_clip",
    "hold_out_test_split",
    "load_audio_text_folder",
    "load_audio_text_shards",
    "load_audiocaps",
    "load_clotho",
    "load_corpus",
    "load_esc50",
    "load_moment_splits",
    "load_moments",
    "load_relevance_judgements",
    "load_synthcaps",
    "load_translations",
    "load_wavcaps",
    "moment_recordings",
    "normalize_language_code",
    "read_caption_list",
    "resample",
    "synthesize_moments",
    "write_audio_text_shards",
    "write_audiocaps_layout",
    "write_clotho_layout",
    "write_esc50_layout",
]

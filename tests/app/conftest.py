"""A sound library and its retrieval pipeline, loaded as ``hf-atr search`` and ``hf-atr serve`` load them."""

from __future__ import annotations

import pytest
from sound_library import SoundLibrary, make_sound_library

from hf_atr.commands.common import load_retrieval_pipeline


@pytest.fixture(scope="session")
def library(tmp_path_factory) -> SoundLibrary:
    return make_sound_library(tmp_path_factory.mktemp("library"))


@pytest.fixture(scope="session")
def pipe(library):
    return load_retrieval_pipeline(str(library.model_dir), index_dir=library.index_dir)

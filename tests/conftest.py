"""Shared fixtures (factories live in tiny_models.py so tests can import them)."""

from __future__ import annotations

import pytest
from tiny_models import make_model, make_processor

from hf_atr import AtrDualEncoderModel, AtrProcessor


@pytest.fixture
def processor() -> AtrProcessor:
    return make_processor("ast")


@pytest.fixture
def model(processor) -> AtrDualEncoderModel:
    return make_model("ast", "bert", processor=processor)

"""Shared fixtures (factories live in tiny_models.py so tests can import them), and the vector level in pytest's
header (vector_level.py)."""

from __future__ import annotations

import pytest
from tiny_models import make_model, make_processor
from vector_level import vector_level_line

from hf_atr import AtrDualEncoderModel, AtrProcessor


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [vector_level_line()]


@pytest.fixture
def processor() -> AtrProcessor:
    return make_processor("ast")


@pytest.fixture
def model(processor) -> AtrDualEncoderModel:
    return make_model("ast", "bert", processor=processor)

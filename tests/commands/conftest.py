"""Starting points for ``hf-atr train`` as users have them: tower directories saved with ``save_pretrained``."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_models import save_towers


@pytest.fixture(scope="session")
def towers(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny AST audio tower and a tiny BERT text tower, each with its feature extractor or tokenizer."""
    return save_towers(tmp_path_factory.mktemp("towers"))

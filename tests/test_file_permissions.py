"""Files hf-atr writes get the permissions of any new file (safetensors alone writes 0o600)."""

from __future__ import annotations

import os
import stat

import pytest
from tiny_models import make_model

from hf_atr.file_permissions import apply_umask, current_umask


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_current_umask_reads_the_umask_without_changing_it(umask):
    previous = os.umask(umask)
    try:
        assert current_umask() == umask
        assert current_umask() == umask
    finally:
        os.umask(previous)


def test_saved_model_weights_are_as_readable_as_the_umask_allows(tmp_path):
    previous = os.umask(0o022)
    try:
        make_model().save_pretrained(tmp_path / "model")
        (tmp_path / "plain").write_text("x")
        expected = stat.S_IMODE((tmp_path / "plain").stat().st_mode)
    finally:
        os.umask(previous)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "model").iterdir()}
    assert modes["model.safetensors"] == expected == 0o644
    assert set(modes.values()) == {expected}


def test_apply_umask(tmp_path):
    path = tmp_path / "weights.safetensors"
    path.write_bytes(b"")
    os.chmod(path, 0o600)
    previous = os.umask(0o002)
    try:
        apply_umask(path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o664

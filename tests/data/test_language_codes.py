"""hf_atr.data.language_codes: language codes read as ISO 639-3."""

from __future__ import annotations

import pytest

from hf_atr.data.language_codes import normalize_language_code


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("fra", "fra"),
        ("fra_Latn", "fra"),
        ("zho_Hans", "zho"),
        ("jpn_Jpan", "jpn"),
        ("ja", "jpn"),
        ("ko", "kor"),
        ("de", "deu"),
        ("zh", "zho"),
        ("FRA", "fra"),
        ("fr-FR", "fra"),
        ("kor_Hang", "kor"),
    ],
)
def test_normalize_language_code(code, expected):
    assert normalize_language_code(code) == expected


@pytest.mark.parametrize("code", ["xx", "und", "zxx", "", "caption", None])
def test_normalize_language_code_rejects_what_is_no_language(code):
    with pytest.raises(ValueError, match=r"is not an ISO 639-1 \('ja'\), ISO 639-3"):
        normalize_language_code(code)

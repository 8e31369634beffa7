"""Language codes read as ISO 639-3: the one reading of every code a user or a translation file gives."""

from __future__ import annotations


def normalize_language_code(code: str) -> str:
    """The ISO 639-3 code of a language code: ISO 639-1 (``"ja"``), ISO 639-3 (``"jpn"``), NLLB/FLORES-200
    (``"jpn_Jpan"``) or a BCP 47 tag (``"ja-JP"``), in any letter case; resolved by ``langcodes``.

    Raises:
        ValueError: ``code`` is not a code of a known language (``"xx"``, ``"und"``, ``""``).
    """
    # langcodes costs ~40 ms to import; only code that reads language codes pays it.
    import langcodes

    language = None
    if isinstance(code, str) and code.strip():
        try:
            parsed = langcodes.Language.get(code.strip().replace("_", "-"))
            language = parsed.to_alpha3() if parsed.language and parsed.is_valid() else None
        except (LookupError, ValueError):
            language = None
    if language is None or language in _NOT_A_LANGUAGE:
        raise ValueError(
            f"Language code {code!r} is not an ISO 639-1 ('ja'), ISO 639-3 ('jpn') or NLLB ('jpn_Jpan') code "
            "of a known language."
        )
    return language


_NOT_A_LANGUAGE = frozenset({"und", "mul", "zxx", "mis"})
"""ISO 639 codes that name no language (undetermined, multiple, no linguistic content, uncoded)."""

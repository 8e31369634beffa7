"""The ``--real-audio DIR`` option of the benchmarks that measure on real recordings (run as scripts, so they import
this module from their own folder).

The folder holds AudioCaps and Clotho samples in their official layouts and labelled Freesound clips. By default a
benchmark looks for a copy kept beside the checkout, used only if it exists; each benchmark's help says what it reads there and what it does without it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_REAL_AUDIO = Path(__file__).resolve().parents[2] / "shared" / "realaudio"
"""Where the recordings are looked for when ``--real-audio`` is not given."""


def add_real_audio_argument(parser: argparse.ArgumentParser, *flags: str, help: str) -> None:
    """Add ``--real-audio DIR`` (or the ``flags`` given, e.g. an older alias first) with :data:`DEFAULT_REAL_AUDIO`
    as its default and ``help`` as its help."""
    parser.add_argument(
        *(flags or ("--real-audio",)), type=Path, default=DEFAULT_REAL_AUDIO, metavar="DIR", help=help
    )

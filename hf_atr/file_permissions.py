"""Files hf-atr writes get the permissions of any new file: ``0o666`` less the process umask.

safetensors (0.8) writes through a private temporary file and renames it, so its files come out ``0o600``
whatever the umask: a model or an index saved for a team to share would be readable by its owner only.
Every writer of hf-atr that goes through such a library calls :func:`apply_umask` on what it wrote.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

DEFAULT_FILE_MODE = 0o666
"""The mode ``open()`` asks for when it creates a file, before the umask is applied."""

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it (``/proc/self/status`` on Linux; elsewhere set and
    restored at once under a lock)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def apply_umask(path: str | os.PathLike) -> None:
    """Give the file at ``path`` the mode a newly created file gets: ``0o666 & ~umask``."""
    os.chmod(path, DEFAULT_FILE_MODE & ~current_umask())


__all__ = ["DEFAULT_FILE_MODE", "apply_umask", "current_umask"]

"""Start-up cost of hf-atr against what it cannot avoid, side by side in fresh interpreters.

Each command runs in a new Python process (so nothing is cached in ``sys.modules``); the commands take turns,
round after round, and each one's best wall-clock time over the rounds is kept (the machine is shared and
noisy; the best run is the one least disturbed). Ratios against these targets:

- ``hf-atr --help`` faster than ``import torch``;
- ``import hf_atr.data`` within 1.5x of ``import datasets, numpy, soundfile``;
- ``import hf_atr`` within 1.15x of ``from transformers import PreTrainedModel, AutoModel``.

Also shown: ``import hf_atr`` followed by that transformers import, which registers our model with
``AutoModel`` and so imports it: the price of the registration, against transformers alone.

Usage: ``python benchmarks/imports.py [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

PYTHON = sys.executable
CLI = str(Path(sys.executable).with_name("hf-atr"))

COMMANDS = {
    "hf-atr --help": [CLI, "--help"],
    "import torch": [PYTHON, "-c", "import torch"],
    "import hf_atr.data": [PYTHON, "-c", "import hf_atr.data"],
    "import datasets, numpy, soundfile": [PYTHON, "-c", "import datasets, numpy, soundfile"],
    "import hf_atr": [PYTHON, "-c", "import hf_atr"],
    "from transformers import PreTrainedModel, AutoModel": [
        PYTHON,
        "-c",
        "from transformers import PreTrainedModel, AutoModel",
    ],
    "import hf_atr; from transformers import PreTrainedModel, AutoModel": [
        PYTHON,
        "-c",
        "import hf_atr; from transformers import PreTrainedModel, AutoModel",
    ],
    "python -c pass (interpreter start)": [PYTHON, "-c", "pass"],
}

TARGETS = (
    ("hf-atr --help", "import torch", 1.0, "faster than"),
    ("import hf_atr.data", "import datasets, numpy, soundfile", 1.5, "within 1.5x of"),
    ("import hf_atr", "from transformers import PreTrainedModel, AutoModel", 1.15, "within 1.15x of"),
)

REGISTRATION = (
    "import hf_atr; from transformers import PreTrainedModel, AutoModel",
    "from transformers import PreTrainedModel, AutoModel",
)


def wall_time(command: list[str]) -> float:
    """Seconds from process start to exit; raises if the command fails."""
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="fresh interpreters per command (default 3)")
    rounds = parser.parse_args().rounds
    best = dict.fromkeys(COMMANDS, float("inf"))
    for _ in range(rounds):
        for name, command in COMMANDS.items():
            best[name] = min(best[name], wall_time(command))
    print(f"Best of {rounds} fresh interpreters, wall clock including interpreter start:")
    width = max(len(name) for name in COMMANDS)
    for name, seconds in best.items():
        print(f"  {name:<{width}}  {seconds:6.2f} s")
    print()
    for measured, reference, limit, relation in TARGETS:
        ratio = best[measured] / best[reference]
        verdict = "met" if (ratio < limit if limit == 1.0 else ratio <= limit) else "NOT met"
        print(f"  {measured!r} / {reference!r} = {ratio:.2f} (target: {relation}; {verdict})")
    registered, transformers_alone = REGISTRATION
    print(
        f"  {registered!r} / {transformers_alone!r} = {best[registered] / best[transformers_alone]:.2f} "
        "(the registration's cost, no target)"
    )


if __name__ == "__main__":
    main()

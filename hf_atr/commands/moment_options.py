"""The moment options that ``hf-atr search`` and ``hf-atr evaluate`` share, declared once: ``--moments``,
``--proposer`` and ``--nms-iou``, and the :class:`~hf_atr.moments.proposal.MomentProposalConfig` they give.

Both commands accept the same proposers, ``baseline`` included (the AMR paper's name for ``sliding_window``), and
the same NMS threshold; only what ``--moments`` does differs (a ranked list of moments across an index, or the
moment metrics of a dataset), so each command gives its help. Without ``--moments``, ``--proposer`` and
``--nms-iou`` end the command with a message rather than being ignored.
"""

from __future__ import annotations

import argparse
from typing import Any

PROPOSER_NAMES = {"refined": "refined", "sliding_window": "sliding_window", "baseline": "sliding_window"}
"""``--proposer`` -> :attr:`MomentProposalConfig.proposer <hf_atr.moments.proposal.MomentProposalConfig>`
(``baseline`` is the AMR paper's sliding-window baseline)."""
DEFAULT_PROPOSER = "refined"
"""The proposer of ``--moments`` without ``--proposer``."""


def add_moment_arguments(parser: argparse.ArgumentParser, moments_help: str) -> Any:
    """Add the group ``moments (--moments)``: ``--moments`` (its help, ``moments_help``, says what it does in this
    command), ``--proposer`` and ``--nms-iou``; returns the group, for a command's own moment options."""
    group = parser.add_argument_group("moments (--moments)")
    group.add_argument("--moments", action="store_true", help=moments_help)
    group.add_argument(
        "--proposer",
        choices=tuple(PROPOSER_NAMES),
        default=None,
        help="how a recording's similarity curve becomes moments: refined (default: smoothing, thresholds "
        "relative to the recording's own scores, boundaries at the windows' resolution, temporal NMS) or "
        "sliding_window, also named baseline (the AMR paper's baseline: each window a moment)",
    )
    group.add_argument(
        "--nms-iou",
        type=float,
        default=None,
        help="temporal NMS of either proposer: drop a moment overlapping a better one by more than this IoU "
        "(default 0.5)",
    )
    return group


def moment_proposal(args: argparse.Namespace, command: str) -> Any:
    """The :class:`~hf_atr.moments.proposal.MomentProposalConfig` of ``--proposer`` / ``--nms-iou``; ``None``
    without ``--moments``.

    Raises:
        SystemExit: ``--proposer`` or ``--nms-iou`` without ``--moments``, or an NMS threshold that is not an IoU
            (the message starts with ``command``, e.g. ``hf-atr search``).
    """
    if not args.moments:
        given = [flag for flag, name in (("--proposer", "proposer"), ("--nms-iou", "nms_iou"))
                 if getattr(args, name) is not None]  # fmt: skip
        if given:
            verb = "apply" if len(given) > 1 else "applies"
            raise SystemExit(f"{command}: {' and '.join(given)} {verb} to --moments.")
        return None
    from hf_atr.moments.proposal import MomentProposalConfig

    options: dict[str, Any] = {"proposer": PROPOSER_NAMES[args.proposer or DEFAULT_PROPOSER]}
    if args.nms_iou is not None:
        options["nms_iou"] = args.nms_iou
    try:
        return MomentProposalConfig(**options)
    except ValueError as error:
        raise SystemExit(f"{command} --moments: {error}") from error


__all__ = ["DEFAULT_PROPOSER", "PROPOSER_NAMES", "add_moment_arguments", "moment_proposal"]

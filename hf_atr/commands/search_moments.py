"""``hf-atr search --moments``: when a described sound happens, as one ranked list of ``(file, start, end, score)``
moments across the indexed files (``pipe.moments(query, top_k=K)``, :mod:`hf_atr.pipelines.moment_scoring`).

Its options are added to ``hf-atr search``'s parser here and its run is called by ``run_search`` once the pipeline is
loaded; nothing heavy is imported before then."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_moment_arguments(parser: argparse.ArgumentParser) -> None:
    """``--moments`` and the proposer's options."""
    group = parser.add_argument_group("moments (--moments)")
    group.add_argument(
        "--moments",
        action="store_true",
        help="find when the described sound happens: one ranked list of moments (file, start, end, score) across "
        "the indexed files, each file scored from its stored windows",
    )
    group.add_argument(
        "--proposer",
        default="refined",
        help="how a file's similarity curve becomes moments: refined (default: smoothing, thresholds relative to "
        "the file's own scores, boundaries at the windows' resolution, temporal NMS) or sliding_window (the AMR "
        "paper's baseline: each window a moment)",
    )
    group.add_argument(
        "--nms-iou",
        type=float,
        default=None,
        help="temporal NMS: drop a moment overlapping a better one by more than this IoU (default 0.5)",
    )


def check_moment_arguments(args: argparse.Namespace) -> Any:
    """The :class:`~hf_atr.moments.proposal.MomentProposalConfig` of the command line, ``None`` without
    ``--moments``; a moment search by example, or a bad proposer option, ends the command with a message."""
    if not args.moments:
        return None
    if args.audio is not None:
        raise SystemExit(
            "hf-atr search: --moments finds when a described sound happens; give a text query (or --queries FILE), "
            "not --audio."
        )
    from hf_atr.moments.proposal import MomentProposalConfig

    options = {"proposer": args.proposer}
    if args.nms_iou is not None:
        options["nms_iou"] = args.nms_iou
    try:
        return MomentProposalConfig(**options)
    except ValueError as error:
        raise SystemExit(f"hf-atr search --moments: {error}") from error


def run_moment_search(pipe: Any, proposal: Any, queries: list[str], args: argparse.Namespace) -> int:
    """Print the moments of each query: a ranked list (``--json``: the list as JSON), or for ``--queries`` one JSON
    line per query, ``{"query", "hits"}`` or ``{"query", "error"}``; exit status 1 when any query failed."""
    failed = 0
    for query in queries:
        try:
            hits = pipe.moments(query, top_k=args.top_k, proposal=proposal)
        except (FileNotFoundError, ValueError) as error:
            if args.queries is None:
                raise SystemExit(f"hf-atr search --moments: {error}") from error
            failed += 1
            print(json.dumps({"query": query, "error": str(error)}, ensure_ascii=False))
            continue
        if args.queries is not None:
            print(json.dumps({"query": query, "hits": hits}, ensure_ascii=False))
        elif args.json:
            print(json.dumps(hits, ensure_ascii=False, indent=2))
        else:
            print(f"Moments of {query!r}:")
            for rank, hit in enumerate(hits, start=1):
                print(
                    f"  {rank}. {hit['id']}  {hit['start']:.2f}-{hit['end']:.2f} s  score={hit['score']:.4f}"
                )
    if failed:
        print(
            f'hf-atr search: {failed} of {len(queries)} queries failed (see their "error").', file=sys.stderr
        )
    return 1 if failed else 0


__all__ = ["add_moment_arguments", "check_moment_arguments", "run_moment_search"]

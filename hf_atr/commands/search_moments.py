"""``hf-atr search --moments``: when a described sound happens, as one ranked list of ``(file, start, end, score)``
moments across the indexed files (``pipe.moments(query, top_k=K)``, :mod:`hf_atr.pipelines.moment_scoring`).

Its options are declared in :mod:`hf_atr.commands.moment_options`, shared with ``hf-atr evaluate --moments``.
``run_search`` checks its refusals before it loads the pipeline, and calls its run once the pipeline is loaded;
nothing heavy is imported before then."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .moment_options import moment_proposal

MOMENTS_HELP = (
    "find when the described sound happens: one ranked list of moments (file, start, end, score) across the indexed "
    "files, each file scored from its stored windows"
)
"""``hf-atr search --moments``'s help (the option is declared in :mod:`hf_atr.commands.moment_options`)."""


def check_moment_arguments(args: argparse.Namespace) -> Any:
    """The :class:`~hf_atr.moments.proposal.MomentProposalConfig` of the command line, ``None`` without
    ``--moments``; a moment search by example, or a bad proposer option, ends the command with a message."""
    if args.moments and args.audio is not None:
        raise SystemExit(
            "hf-atr search: --moments finds when a described sound happens; give a text query (or --queries FILE), "
            "not --audio."
        )
    return moment_proposal(args, "hf-atr search")


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


__all__ = ["MOMENTS_HELP", "check_moment_arguments", "run_moment_search"]

"""``run_cli``: the index, search and evaluate sub-commands called as the command line calls them."""

from __future__ import annotations

import argparse

from hf_atr.commands.evaluate import add_evaluate_parser
from hf_atr.commands.index import add_index_parser
from hf_atr.commands.search import add_search_parser


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hf-atr")
    commands = parser.add_subparsers(dest="command", required=True)
    for add_parser in (add_index_parser, add_search_parser, add_evaluate_parser):
        add_parser(commands)
    args = parser.parse_args(argv)
    return args.handler(args)

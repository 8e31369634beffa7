"""``hf-atr serve --model M --index I``: the search page (:mod:`hf_atr.app.search_page`) on a local web server.

Everything that can be checked before serving is checked first, in the order of its cost, and ends the command
with a message naming what is wrong: gradio installed (``pip install 'hf-atr[app]'``), the index directory and an
index in it, the model and the index loaded as ``hf-atr search`` loads them, an audio index in it that holds at
least one file (each refusal names the ``hf-atr index`` command that fills it). gradio is imported only once the
command runs, so ``hf-atr --help`` stays light.
"""

from __future__ import annotations

import argparse
import ipaddress
import shlex
import socket
from pathlib import Path
from typing import Any

from .common import add_dtype_argument, load_retrieval_pipeline, model_dtype_arguments

DEFAULT_HOST = "127.0.0.1"
DEFAULT_TOP_K = 10


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr serve --model DIR --index INDEX [--host H] [--port N] [--top-k K]``."""
    parser = subparsers.add_parser(
        "serve",
        help="a local web page to search an index by text or by example, and listen to the results",
        description="Start a local search page (gradio; pip install 'hf-atr[app]') over an index built by "
        "`hf-atr index`: type a description or drop an audio file, and see the best-matching files ranked with "
        "their scores and, for long recordings, the time span that matched, each with a player that starts "
        "there. It runs the same search as `hf-atr search`. The page is served on 127.0.0.1 (this machine only) "
        "unless --host says otherwise; stop it with Ctrl-C.",
    )
    parser.add_argument(
        "--model", required=True, help="directory (or Hub id) of the model that built the index"
    )
    parser.add_argument("--index", required=True, help="index directory (written by `hf-atr index`)")
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to serve on (default: {DEFAULT_HOST}, this machine only; 0.0.0.0 serves every network "
        "interface, without any authentication)",
    )
    parser.add_argument("--port", type=int, default=None, help="port (default: the first free one from 7860)")
    parser.add_argument(
        "--top-k", type=int, default=DEFAULT_TOP_K, help=f"files listed per query (default: {DEFAULT_TOP_K})"
    )
    add_dtype_argument(parser)
    parser.set_defaults(handler=run_serve)
    return parser


def run_serve(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr serve``: check, load, then serve until interrupted."""
    from hf_atr.app import require_gradio

    try:
        require_gradio()
    except ImportError as error:
        raise SystemExit(f"hf-atr serve: {error}") from error
    if args.top_k < 1:
        raise SystemExit(f"--top-k must be at least 1, got {args.top_k}.")
    if args.port is not None and not 0 < args.port < 65536:
        raise SystemExit(f"--port must be between 1 and 65535, got {args.port}.")
    from hf_atr.pipelines.persistence import SKIPPED_FILENAME, holds_index

    index_dir = Path(args.index).expanduser()
    if not index_dir.is_dir():
        raise SystemExit(f"--index {args.index}: no such directory.")
    model, index = shlex.quote(args.model), shlex.quote(args.index)
    if not holds_index(index_dir):
        raise SystemExit(
            f"--index {args.index} holds no index: build one of your audio files with "
            f"`hf-atr index --model {model} --audio-dir DIR --out {index}`."
        )
    _check_address(args.host, args.port)
    pipe = load_retrieval_pipeline(args.model, index_dir=index_dir, **model_dtype_arguments(args))
    if pipe.audio_index is None:
        raise SystemExit(
            f"--index {args.index} holds captions only; the search page searches audio files: build an index of "
            f"them with `hf-atr index --model {args.model} --audio-dir DIR --out {args.index} --append`."
        )
    if len(pipe.audio_index) == 0:
        skipped = (
            f" ({len(pipe.skipped)} file(s) could not be decoded: see {index_dir / SKIPPED_FILENAME})"
            if pipe.skipped
            else ""
        )
        raise SystemExit(
            f"--index {args.index} holds no audio files{skipped}, so the search page would find nothing: add "
            f"some with `hf-atr index --model {model} --audio-dir DIR --out {index} --append`."
        )
    from hf_atr.app.search_page import SearchPage

    search_page = SearchPage(pipe, top_k=args.top_k, heading=_heading(args, pipe))
    if not _is_loopback(args.host):
        print(
            f"hf-atr serve: serving on {args.host}: anyone who can reach this machine can use the page and listen "
            "to the indexed files (there is no authentication)."
        )
    try:
        page, local_url = search_page.launch(args.host, args.port)
    except OSError as error:  # the port was taken while the model loaded
        raise SystemExit(_cannot_serve(args.host, args.port, error)) from error
    print(f"Search page for {args.index}: {local_url} (Ctrl-C to stop)", flush=True)
    try:
        page.block_thread()
    finally:
        page.close()
    return 0


def _heading(args: argparse.Namespace, pipe: Any) -> str:
    """What the page searches: the index, its files and windows, what was skipped, and the model."""
    index = pipe.audio_index
    files = len(set(index.ids))
    windows = f" in {len(index)} windows" if index.spans is not None and len(index) != files else ""
    skipped = f"; {len(pipe.skipped)} unreadable file(s) left out when indexing" if pipe.skipped else ""
    return f"Index `{args.index}`: {files} file(s){windows}{skipped}. Model `{args.model}`."


def _check_address(host: str, port: int | None) -> None:
    """End the command when ``host`` is not an address of this machine or ``port`` is taken, before the model
    loads (gradio would find it out later, some of it in its server's thread)."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port or 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as probe:
            # As the server binds: a port whose last connections are still closing (TIME_WAIT) is free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as error:  # socket.gaierror (unknown host name) included
        raise SystemExit(_cannot_serve(host, port, error)) from error


def _cannot_serve(host: str, port: int | None, error: OSError) -> str:
    hint = "choose another --port" if port is not None else "give an address of this machine with --host"
    return f"hf-atr serve: cannot serve on {host}:{port or 'any port'}: {error} ({hint})."


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["DEFAULT_HOST", "DEFAULT_TOP_K", "add_serve_parser", "run_serve"]

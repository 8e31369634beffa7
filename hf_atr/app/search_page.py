"""The search page of ``hf-atr serve``: a gradio ``Blocks`` over a retrieval pipeline and its audio index.

One types a description (Enter or *Search*; *Find moments* for when it happens: each moment with a waveform strip of
its file), or drops, uploads or records an audio file (query by example,
searched as soon as it is there); the page lists the ranked files with their scores and, for a windowed index,
their best-matching spans, each with a player holding that span (:mod:`hf_atr.app.results`), and the hits as
``hf-atr search --json`` prints them. A query the page cannot answer (empty, an unreadable upload, an index
without the asked kind of entries) shows its message on the page. This is the one module that imports gradio.

Example::

    from transformers import pipeline
    pipe = pipeline("audio-text-retrieval", model="my-model", index_dir="my-index")
    page, url = SearchPage(pipe, top_k=10, heading="my-index").launch("127.0.0.1")
"""

from __future__ import annotations

import html
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr
from transformers.utils import logging

from hf_atr.app.moment_view import WaveformStrips, search_moments
from hf_atr.app.results import Answer, ExcerptWriter, QueryError, SearchResult, search_example, search_text

logger = logging.get_logger(__name__)

TEXT_SEARCH_API = "search_text"
"""The page's endpoint for text queries (``gradio_client.Client(url).predict(text, api_name="/search_text")``)."""
EXAMPLE_SEARCH_API = "search_audio"
"""The page's endpoint for queries by example (an audio file)."""
MOMENT_SEARCH_API = "search_moments"
"""The page's endpoint for moment queries (text: when the sound happens, ``hf-atr search --moments``)."""
CACHE_SECONDS = 3600
"""Uploads and excerpts older than this are deleted from gradio's cache (checked as often)."""
PAGE_CSS = """
.result-line p { margin: 0.2em 0 !important; }
.result-path { color: var(--body-text-color-subdued); font-size: var(--text-sm); word-break: break-all; }
.search-error { color: var(--error-text-color); }
.waveform-strip { display: block; max-width: 100%; height: auto; margin-top: 0.3em; }
"""


class SearchPage:
    """The page's behaviour and layout over one pipeline.

    Args:
        pipe: an ``audio-text-retrieval`` pipeline holding an audio index (``hf-atr serve`` loads it as
            ``hf-atr search`` does).
        top_k: how many files a query lists (one result slot each).
        heading: what the page says it searches (e.g. the index directory and the model).
        excerpt_dir: where the players' excerpts are written; default a new folder under the system's temporary
            folder, removed with the page.
    """

    def __init__(self, pipe: Any, *, top_k: int, heading: str, excerpt_dir: str | Path | None = None) -> None:
        if not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}.")
        self.pipe = pipe
        self.top_k = top_k
        self.heading = heading
        if excerpt_dir is None:
            excerpt_dir = tempfile.mkdtemp(prefix="hf-atr-serve-")
            weakref.finalize(self, shutil.rmtree, excerpt_dir, ignore_errors=True)
        self.excerpts = ExcerptWriter(excerpt_dir)
        self.strips = WaveformStrips()

    # Behaviour: each returns the values of the page's outputs (status, JSON, then per result slot: its
    # visibility, its line and its player).

    def text_search(self, text: str | None) -> list[Any]:
        """A text query's outputs (the *Search* button and Enter in the text box)."""
        return self._outputs(lambda: search_text(self.pipe, text, self.top_k))

    def example_search(self, audio_path: str | None) -> list[Any]:
        """A query by example's outputs (an uploaded or recorded file)."""
        return self._outputs(lambda: search_example(self.pipe, audio_path, self.top_k))

    def moment_search(self, text: str | None) -> list[Any]:
        """A moment query's outputs (the *Find moments* button): each result a moment with its file's waveform
        strip."""
        return self._outputs(lambda: search_moments(self.pipe, text, self.top_k))

    def _outputs(self, ask: Callable[[], Answer]) -> list[Any]:
        started = time.perf_counter()
        try:
            answer = ask()
        except QueryError as error:
            message = str(error)
        except Exception as error:  # the page's boundary: say what failed, keep the traceback in the terminal
            logger.error("The search page's query failed", exc_info=True)
            message = f"The search failed: {type(error).__name__}: {error} (details in the terminal)."
        else:
            found = len(answer.hits)
            status = (
                f"{found} {answer.unit}{'s' if found != 1 else ''} for {_escaped(answer.query)} ({time.perf_counter() - started:.2f} s)"
                if found
                else f"Nothing found for {_escaped(answer.query)}."
            )
            return [status, answer.hits_json(), *self._slots(answer.results, strips=answer.unit == "moment")]
        return [_message(message), "", *self._slots([])]

    def _slots(self, results: list[SearchResult], *, strips: bool = False) -> list[Any]:
        values: list[Any] = []
        for slot in range(self.top_k):
            if slot >= len(results):
                values += [gr.Row(visible=False), "", None]
                continue
            result = results[slot]
            try:
                excerpt, note = str(self.excerpts.excerpt(result)), ""
            except QueryError as error:
                excerpt, note = None, f"\n\n{_message(str(error))}"
            strip = f"\n\n{self.strips.strip(result)}" if strips else ""
            values += [gr.Row(visible=True), _result_line(result) + strip + note, excerpt]
        return values

    # Layout ------------------------------------------------------------------------------------------

    def build(self) -> gr.Blocks:
        """The page's ``Blocks``, not yet served (:meth:`launch` serves it)."""
        with gr.Blocks(
            title="hf-atr search", analytics_enabled=False, delete_cache=(CACHE_SECONDS, CACHE_SECONDS)
        ) as page:
            gr.Markdown(f"## Sound search\n{self.heading}")
            with gr.Row():
                with gr.Column(scale=3):
                    with gr.Row(equal_height=True):
                        text = gr.Textbox(
                            label="Describe the sound",
                            placeholder="a dog barks in the distance",
                            scale=5,
                            elem_id="query",
                        )
                        search = gr.Button(
                            "Search", variant="primary", scale=1, min_width=100, elem_id="search"
                        )
                        find_moments = gr.Button(
                            "Find moments", scale=1, min_width=100, elem_id="find-moments"
                        )
                    status = gr.Markdown("Type a description, or drop an audio file.", elem_id="status")
                with gr.Column(scale=2):
                    audio = gr.Audio(
                        label="…or drop a recording to find the sounds most like it",
                        sources=["upload", "microphone"],
                        type="filepath",
                        elem_id="example",
                    )
            slots = []
            for slot in range(self.top_k):
                with gr.Row(visible=False, elem_id=f"result-{slot + 1}", elem_classes="result") as row:
                    line = gr.Markdown(elem_classes="result-line")
                    player = gr.Audio(
                        show_label=False,
                        interactive=False,
                        buttons=[],  # the browser's player offers the download
                        waveform_options=gr.WaveformOptions(show_recording_waveform=False),
                        elem_classes="result-player",
                    )
                slots += [row, line, player]
            with gr.Accordion("Results as JSON (what hf-atr search --json prints)", open=False):
                hits_json = gr.Code(language="json", show_label=False, elem_id="hits-json")
            outputs = [status, hits_json, *slots]
            # One query at a time: the pipeline keeps per-call state and the model is used in place.
            queue = {"concurrency_id": "search", "concurrency_limit": 1}
            gr.on(
                [search.click, text.submit],
                self.text_search,
                text,
                outputs,
                api_name=TEXT_SEARCH_API,
                **queue,
            )
            gr.on(
                [find_moments.click],
                self.moment_search,
                text,
                outputs,
                api_name=MOMENT_SEARCH_API,
                **queue,
            )
            gr.on(
                [audio.upload, audio.stop_recording],
                self.example_search,
                audio,
                outputs,
                api_name=EXAMPLE_SEARCH_API,
                **queue,
            )
        return page

    def launch(self, host: str, port: int | None = None) -> tuple[gr.Blocks, str]:
        """Serve the page on ``host:port`` (``None``: the first free port from 7860) in a background thread;
        returns the running ``Blocks`` (``block_thread()`` waits for Ctrl-C, ``close()`` stops it) and its URL.

        Raises:
            OSError: the port is taken, or the address is not this machine's.
        """
        page = self.build()
        _, url, _ = page.launch(
            server_name=host,
            server_port=port,
            prevent_thread_lock=True,
            quiet=True,
            share=False,
            ssr_mode=False,
            footer_links=[],
            css=PAGE_CSS,
        )
        return page, url


def _message(text: str) -> str:
    return f"<span class='search-error'>⚠ {_escaped(text)}</span>"


_MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+!|~])")


def _escaped(text: str) -> str:
    """``text`` shown as it is: HTML and Markdown characters (file names with ``_`` or ``*``) escaped."""
    return _MARKDOWN_SPECIALS.sub(r"\\\1", html.escape(text, quote=False))


def _result_line(result: SearchResult) -> str:
    """``**1.** `take 3.wav` · 38.00–40.00 s · score 0.4123`` and the file's path under it."""
    parts = [
        f"**{result.rank}.** <code>{_escaped(result.id)}</code>",
        *([result.span] if result.span else []),
        f"score {result.score:.4f}",
    ]
    line = " · ".join(parts)
    return (
        line if result.path is None else f"{line}\n\n<span class='result-path'>{_escaped(result.path)}</span>"
    )


__all__ = ["EXAMPLE_SEARCH_API", "MOMENT_SEARCH_API", "PAGE_CSS", "TEXT_SEARCH_API", "SearchPage"]

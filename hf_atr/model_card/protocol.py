"""The card's prose for how figures were obtained: the evaluation protocol, the data's provenance, the cuts.

Each function turns a JSON-ready record into Markdown lines: :func:`protocol_lines` an evaluator's ``protocol``
(:attr:`~hf_atr.evaluation.evaluator.RetrievalEvaluator.protocol`), :func:`provenance_lines` a training set's
provenance (corpus, release, clips found, the overlap filter), :func:`training_cut_description` how training clips
met the extractor's window, :func:`compute_description` what computed the figures.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..data.corpora import HELD_OUT_FILTER
from ..data.overlap import OVERLAP_FILTER
from ..metrics.moments import MOMENT_RETRIEVAL_TASK

MAX_SKIPPED_LISTED = 5
"""How many of the clips an evaluation skipped as undecodable the card names (the rest are counted)."""


def evaluated_set_name(eval_dataset: str, protocol: Mapping[str, Any] | None) -> str:
    """The evaluated data as the card and its model-index name it: ``eval_dataset`` and, when the protocol
    counts them, the clips evaluated (``"Clotho test (1,045 clips)"``)."""
    clips = (protocol or {}).get("clips")
    return f"{eval_dataset} ({clips:,} clips)" if clips is not None else eval_dataset


def incomplete_test_set_warning(protocol: Mapping[str, Any]) -> str | None:
    """A Markdown warning when fewer clips were evaluated than the official split holds, else ``None``."""
    official, clips = protocol.get("official_clips"), protocol.get("clips")
    if not official or clips is None or clips >= official:
        return None
    corpus = protocol.get("corpus") or {}
    release = corpus.get("official_release") or corpus.get("corpus") or "the official release"
    split = corpus.get("corpus_split") or corpus.get("split") or protocol.get("split") or "evaluation"
    return (
        f"> **Incomplete test set**: {clips:,} of the {official:,} clips of the {split} split of {release} were "
        f"evaluated ({official - clips:,} missing, skipped or filtered out); these figures are not comparable "
        "with results on the full split."
    )


def protocol_lines(protocol: Mapping[str, Any]) -> str:
    """The protocol behind an evaluation table (:attr:`RetrievalEvaluator.protocol`, or a moment evaluation's)
    as a Markdown list."""
    if protocol.get("task") == MOMENT_RETRIEVAL_TASK:
        return moment_protocol_lines(protocol)
    corpus = protocol.get("corpus")
    split = protocol.get("split")
    if corpus:
        parts = corpus.get("concatenated") or [corpus]
        data = " + ".join(split_description(part, counts=False) for part in parts)
    else:
        data = f"split `{split}`" if split else "the evaluation set"
    clips = f"{protocol['clips']:,} clips evaluated" if protocol.get("clips") is not None else None
    if clips and protocol.get("official_clips"):
        clips += f" of {protocol['official_clips']:,} in the official split"
    if clips and corpus and corpus.get("skipped"):
        clips += f" ({corpus['skipped']:,} clips or rows skipped when loading)"
    languages = ", ".join(protocol.get("languages") or []) or "eng"
    if protocol.get("relevance") == "judgements":
        threshold = protocol.get("relevance_threshold")
        relevance = (
            f"relevance judgements `{protocol.get('relevance_file') or 'given in code'}`"
            + (f" (relevant when >= {threshold})" if threshold is not None else "")
            + f", {protocol.get('relevant_clips_per_caption', 0):.2f} relevant clips per caption; "
            f"{protocol.get('captions_without_judgement', 0):,} captions without judgement left out"
        )
    else:
        relevance = "each caption's own clip is its only relevant clip"
    scores = (
        f"entropic OT plan (m-LTM Eq. 5, reg {protocol.get('ot_reg')})"
        if protocol.get("scoring") == "ot_plan"
        else f"the model's scoring head ({protocol.get('similarity') or 'its similarity'})"
    )
    lines = [
        "Protocol:",
        "",
        f"- data: {data}" + (f"; {clips}" if clips else ""),
        f"- queries: {protocol.get('captions', 0):,} captions; languages: {languages}",
        f"- relevance: {relevance}",
        f"- ties: {protocol.get('tie_rule')}",
        f"- scores: {scores}; R@k at k = {', '.join(map(str, protocol.get('ks') or []))}, mAP at "
        f"{', '.join(map(str, protocol.get('map_cutoffs') or []))}",
        f"- long clips: {_window_description(protocol)}",
    ]
    if protocol.get("compute"):
        lines.append(f"- computed with: {compute_description(protocol['compute'])}")
    skipped = protocol.get("skipped_clips") or []
    if skipped:
        lines.append(_skipped_line(skipped, "audio_id", "clips", "their captions"))
    return "\n".join(lines)


def _skipped_line(skipped: list[Mapping[str, Any]], name_key: str, what: str, left_out_with: str) -> str:
    """``- skipped: N <what> could not be decoded ...``: the first :data:`MAX_SKIPPED_LISTED` named, with reasons."""
    listed = "; ".join(f"`{item[name_key]}` ({item['reason']})" for item in skipped[:MAX_SKIPPED_LISTED])
    more = f" and {len(skipped) - MAX_SKIPPED_LISTED:,} more" if len(skipped) > MAX_SKIPPED_LISTED else ""
    return (
        f"- skipped: {len(skipped):,} {what} could not be decoded and were left out with {left_out_with}: "
        f"{listed}{more}"
    )


def moment_protocol_lines(protocol: Mapping[str, Any]) -> str:
    """The protocol of a moment evaluation (:class:`~hf_atr.evaluation.moment_evaluator.MomentEvaluator`) as a
    Markdown list."""
    proposal = protocol.get("proposal") or {}
    lines = [
        "Protocol:",
        "",
        f"- data: split `{protocol.get('split')}`; {protocol.get('queries', 0):,} queries over "
        f"{protocol.get('recordings', 0):,} recordings ({protocol.get('audio_seconds', 0) / 3600:.2f} h)",
        f"- scores: each recording encoded once in windows of {protocol.get('window_seconds'):g} s every "
        f"{protocol.get('hop_seconds'):g} s, each query's similarity curve turned into moments by the "
        f"{proposal.get('proposer')} proposer ({', '.join(f'{k} {v}' for k, v in proposal.items() if k != 'proposer')})",
        f"- metrics: {protocol.get('metrics')}",
    ]
    if protocol.get("compute"):
        lines.append(f"- computed with: {compute_description(protocol['compute'])}")
    skipped = protocol.get("skipped_recordings") or []
    if skipped:
        queries = f"their {protocol.get('skipped_queries', 0):,} queries"
        lines.append(_skipped_line(skipped, "recording", "recordings", queries))
    return "\n".join(lines)


def compute_description(compute: Mapping[str, Any]) -> str:
    """``torch 2.13.0+cpu on cpu, 1 thread, CPU capability AVX2`` from a protocol's ``compute`` record
    (:func:`hf_atr.training.final_model.compute_record`), with why it matters."""
    threads = compute.get("threads")
    parts = [f"torch {compute.get('torch')} on {compute.get('device')}"]
    if threads is not None:
        parts.append(f"{threads} thread{'s' if threads != 1 else ''}")
    if compute.get("cpu_capability"):
        parts.append(f"CPU capability {compute['cpu_capability']}")
    return (
        ", ".join(parts)
        + " (another thread count or instruction set sums in another order, so a rerun there "
        "gives slightly different figures)"
    )


def _window_description(protocol: Mapping[str, Any]) -> str:
    """How the evaluated clips were encoded: whole by the model's own protocol (and how many it cut to its
    extractor's window), or window by window and pooled."""
    window = protocol.get("window_pooling")
    if window is None:
        cut = protocol.get("clips_cut_to_window")
        return (
            "each clip encoded in one forward pass of the inputs its processor prepares (the model's own "
            + (
                f"protocol; {cut:,} clips longer than the extractor's window were cut to it)"
                if cut
                else "protocol)"
            )
        )
    if window.get("window_seconds") is None:
        return f"{window.get('pooling')} pooling asked for; every clip fits one window (read whole)"
    return (
        f"{window.get('pooling')} of the normalised embeddings of {window['window_seconds']:g}-s windows every "
        f"{window['hop_seconds']:g} s (`{json.dumps(window, default=str)}`)"
    )


def provenance_lines(provenance: Mapping[str, Any] | None) -> list[str]:
    """Card lines (Markdown list items) for a training dataset's provenance: each corpus split with its release
    and the clips found against the official count, the filters applied (the overlap filter and what it
    removed; a held-out test split), and ``overlap filter: not applied`` when none ran. Empty without a
    provenance."""
    if not provenance:
        return []
    parts = provenance.get("concatenated") or [provenance]
    filters = [record for part in parts for record in part.get("filters") or []]
    if "concatenated" in provenance:
        filters += provenance.get("filters") or []
    lines = [f"- source: {split_description(part)}" for part in parts]
    for record in filters:
        lines.append(f"- {_filter_description(record)}")
    if not any(record.get("name") == OVERLAP_FILTER for record in filters):
        lines.append(
            "- overlap filter: not applied (the training clips were not checked against evaluation clips)"
        )
    return lines


def split_description(part: Mapping[str, Any], counts: bool = True) -> str:
    """``Clotho `train` (Clotho v2.1 as distributed, official CSV): 3,839 clips found of 3,839 in the official
    split`` (without ``counts``: up to the colon)."""
    corpus = part.get("corpus") or "unnamed corpus"
    split = part.get("split")
    corpus_split = part.get("corpus_split")
    named = f"{corpus} `{split}`" if split else corpus
    if corpus_split and corpus_split != split:
        named += f" (the corpus's `{corpus_split}`)"
    details = ", ".join(str(part[key]) for key in ("official_release", "layout") if part.get(key))
    if details:
        named += f" ({details})"
    found = part.get("clips_found")
    numbers = []
    if found is not None:
        official = part.get("official_clips")
        numbers.append(
            f"{found:,} clips found of {official:,} in the official split"
            if official
            else f"{found:,} clips found"
        )
    if part.get("skipped"):
        numbers.append(f"{part['skipped']:,} clips or rows skipped when loading")
    return named + (": " + ", ".join(numbers) if numbers and counts else "")


def _filter_description(record: Mapping[str, Any]) -> str:
    if record.get("name") == OVERLAP_FILTER:
        by_source_id, by_content = record.get("removed_by_source_id", 0), record.get("removed_by_content", 0)
        reference = ", ".join(record.get("reference") or []) or "the reference data"
        text = (
            f"overlap filter (by {' and '.join(record.get('by') or [])}): removed {by_source_id + by_content:,} of "
            f"{record.get('clips_checked', 0):,} clips ({by_source_id:,} by source id, {by_content:,} by audio "
            f"content) that are clips of {reference} ({record.get('reference_clips', 0):,} reference clips)"
        )
        notes = []
        if record.get("without_source_id"):
            notes.append(f"{record['without_source_id']:,} clips had no source id")
        if record.get("unreadable"):
            notes.append(f"{record['unreadable']:,} could not be hashed and were kept")
        return text + ("; " + ", ".join(notes) if notes else "")
    if record.get("name") == HELD_OUT_FILTER:
        return (
            f"held out at random (seed {record.get('seed')}) as the test split: {record.get('held_out'):,} of "
            f"{record.get('clips_before'):,} clips; {record.get('clips_after'):,} remain here"
        )
    details = ", ".join(f"{key}: {value}" for key, value in record.items() if key != "name")
    return f"filter `{record.get('name', 'unnamed')}`" + (f" ({details})" if details else "")


def training_cut_description(training_audio: Mapping[str, Any]) -> str:
    """How the training clips met the extractor's window, from a ``training_audio`` record (see
    :func:`hf_atr.training.final_model.training_audio_record`): ``33 of 33 training clips were longer than the
    feature extractor's 2.00-s window and were cut to it (the first 2.00 s of each)``."""
    clips, cut = training_audio.get("clips"), training_audio.get("clips_cut_to_window")
    seconds = training_audio.get("window_seconds")
    window = (
        f"the feature extractor's {seconds:.2f}-s window" if seconds else "the feature extractor's window"
    )
    kept = training_audio.get("kept")
    if cut is None:
        what = "streamed training clips" if clips is None else f"{clips:,} training clips"
        return f"{what}; those longer than {window} were cut to it ({kept}); not counted"
    if not cut:
        return f"none of the {clips:,} training clips was longer than {window}"
    return f"{cut:,} of {clips:,} training clips were longer than {window} and were cut to it" + (
        f" ({kept})" if kept else ""
    )


__all__ = [
    "compute_description",
    "evaluated_set_name",
    "incomplete_test_set_warning",
    "protocol_lines",
    "provenance_lines",
    "split_description",
    "training_cut_description",
]

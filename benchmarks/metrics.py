"""Retrieval metrics: hf_atr's chunked counting vs the seed papers' per-query argsort loop.

Side by side in one run, on the same synthetic L2-normalised embeddings (5 captions per clip, d = 512):

* ours: `hf_atr.metrics.retrieval.retrieval_metrics_from_embeddings` (scores computed in blocks,
  ranks counted against each relevant item's score, no sort);
* baseline: the loop of the seed papers' evaluation code (XinhaoMei's `t2a` / `a2t`, reused by m-LTM,
  DART, ASK): for every query, `np.argsort` of its full score row, then `np.where` to find the relevant
  items' positions. Twice: with its score rows from one batched product (generous to it), and with the
  scores computed per query as the papers' code does (one clip's captions, or one clip, at a time).
  Score computation is included in every time.

What is measured, per method, one after the other in this process:
* time: wall-clock seconds of the metric call (`time.perf_counter`), score computation included;
* peak memory: the rise of the process's peak resident set size (Linux VmHWM, reset through
  /proc/self/clear_refs after `malloc_trim`, just before the call) over its resident size at that
  moment. Unlike tracemalloc, this covers torch's allocations as well as NumPy's.

The time of the bare score matrix product is printed as well: it is the floor for any exact method,
and the baseline's time is that product plus its sorting, so the speed-up is bounded by the ratio of the
two (it grows with the number of threads, which speed up the product but not NumPy's argsort).
The speed-up returned and summarised is the one over the batched-product loop.

Problems: Clotho-size (1,045 clips x 5,225 captions) with the full baselines, and 10k clips x 50k
captions where the baselines are timed on a random 4 % of the clips and their captions and extrapolated
linearly (printed when done; `--full-baseline` runs them all). Values are compared (up to the rounding
of the averages): every key at Clotho size, the T2A keys of the timed subset at 10k x 50k.

Several relevant clips per caption (DCASE 2025): each problem is also evaluated with every caption
relevant to its own clip plus 0-3 random others (1.8 on average, DCASE 2025's evaluation-set mean), on
the same embeddings; its time is printed against one clip per caption (measured alternately, best of 3;
once at 10k x 50k), and at Clotho size every key is compared with the batched argsort loop given the
same relevance lists.

Moment retrieval: `hf_atr.metrics.moments.moment_retrieval_metrics` on 10k random queries (1-5
annotated moments, 0-14 predictions each; 1k with --quick) against the per-query reference the tests check it
with (tests/moment_reference.py: loops over queries, thresholds, predictions and moments, as Moment-DETR's script
runs), values compared to 1e-12.

    python benchmarks/metrics.py            # both problems (a few minutes)
    python benchmarks/metrics.py --quick    # a small problem, seconds
    python benchmarks/metrics.py --moments-only

Run from the repository root with hf_atr importable (``pip install -e .`` or ``PYTHONPATH=.``).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from hf_atr.metrics.moments import moment_retrieval_metrics
from hf_atr.metrics.retrieval import retrieval_metrics_from_embeddings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from moment_reference import brute_force_moment_metrics, random_moment_problem  # noqa: E402

CAPTIONS_PER_CLIP = 5
EMBED_DIM = 512
KS = (1, 5, 10)
MAP_CUTOFF = 10
TARGET_SPEEDUP = 10.0
# Probabilities of 0, 1, 2, 3 extra relevant clips per caption: 1.8 relevant clips per caption on average.
EXTRA_CLIP_PROBABILITIES = (0.4, 0.45, 0.1, 0.05)


def make_problem(n_audio: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Audio `(n_audio, 512)`, captions `(5 * n_audio, 512)` near their clip, and each caption's clip."""
    generator = torch.Generator().manual_seed(seed)
    audio = torch.nn.functional.normalize(torch.randn(n_audio, EMBED_DIM, generator=generator), dim=1)
    text_to_audio = np.repeat(np.arange(n_audio), CAPTIONS_PER_CLIP)
    noise = torch.randn(len(text_to_audio), EMBED_DIM, generator=generator) * (6 / EMBED_DIM**0.5)
    text = torch.nn.functional.normalize(audio[torch.from_numpy(text_to_audio)] + noise, dim=1)
    return audio, text, text_to_audio


def argsort_loop_t2a(scores: np.ndarray, clips: np.ndarray) -> list[int]:
    """0-based rank of each caption's clip, as in the papers: argsort the row, find the clip."""
    ranks = []
    for row, clip in zip(scores, clips):
        order = np.argsort(row)[::-1]
        ranks.append(int(np.where(order == clip)[0][0]))
    return ranks


def argsort_loop_a2t(scores_per_clip: np.ndarray, relevant: list[np.ndarray]) -> list[list[int]]:
    """Sorted 0-based positions of each clip's captions: argsort the clip's row, find each caption."""
    positions = []
    for row, captions in zip(scores_per_clip, relevant):
        order = np.argsort(row)[::-1]
        positions.append(sorted(int(np.where(order == caption)[0][0]) for caption in captions))
    return positions


def several_relevant_clips(text_to_audio: np.ndarray, n_audio: int, seed: int = 2) -> list[list[int]]:
    """Each caption's own clip plus 0-3 other random clips (`EXTRA_CLIP_PROBABILITIES`)."""
    rng = np.random.default_rng(seed)
    extra_counts = rng.choice(
        len(EXTRA_CLIP_PROBABILITIES), size=len(text_to_audio), p=EXTRA_CLIP_PROBABILITIES
    )
    relevant = []
    for clip, extra in zip(text_to_audio, extra_counts):
        others = rng.choice(n_audio - 1, size=extra, replace=False)
        relevant.append([int(clip), *(int(o) + (o >= clip) for o in others)])
    return relevant


def summarise(direction: str, positions: list[list[int]], fractions: bool | None = None) -> dict[str, float]:
    """The metric definitions, written out independently of the library.

    `fractions`: report recall_fraction@k (default: for A2T only, as the library does with one clip per caption).
    """
    best = np.array([p[0] for p in positions])
    metrics = {f"{direction}_R@{k}": float(np.mean(best < k)) for k in KS}
    if fractions if fractions is not None else direction == "a2t":
        for k in KS:
            metrics[f"{direction}_recall_fraction@{k}"] = float(
                np.mean([np.mean(np.array(p) < k) for p in positions])
            )
    average_precision = [
        sum((i + 1) / (p + 1) for i, p in enumerate(ps) if p < MAP_CUTOFF) / min(MAP_CUTOFF, len(ps))
        for ps in positions
    ]
    metrics[f"{direction}_mAP@{MAP_CUTOFF}"] = float(np.mean(average_precision))
    metrics[f"{direction}_median_rank"] = float(np.median(best + 1))
    metrics[f"{direction}_mean_rank"] = float(np.mean(best + 1))
    return metrics


def run_baseline(
    audio: torch.Tensor,
    text: torch.Tensor,
    text_to_audio: np.ndarray,
    fraction: float,
    per_query_scores: bool,
) -> dict:
    """The argsort loop for a random `fraction` of the clips (A2T) and their captions (T2A), extrapolated.

    With `per_query_scores`, scores are computed as in the papers' code (T2A: one clip's captions against
    all clips; A2T: one clip against all captions); otherwise by one batched product, which is faster.
    """
    rng = np.random.default_rng(1)
    n_text, n_audio = len(text), len(audio)
    clips = np.sort(rng.choice(n_audio, size=max(1, round(fraction * n_audio)), replace=False))
    captions_of_clip = [np.flatnonzero(text_to_audio == clip) for clip in clips]
    t2a_queries = np.concatenate(captions_of_clip)

    start = time.perf_counter()
    if per_query_scores:
        t2a_ranks = [
            rank
            for captions in captions_of_clip
            for rank in argsort_loop_t2a((text[captions] @ audio.T).numpy(), text_to_audio[captions])
        ]
    else:
        t2a_ranks = argsort_loop_t2a((text[t2a_queries] @ audio.T).numpy(), text_to_audio[t2a_queries])
    t2a_seconds = time.perf_counter() - start
    start = time.perf_counter()
    if per_query_scores:
        a2t_positions = [
            argsort_loop_a2t((audio[[clip]] @ text.T).numpy(), [captions])[0]
            for clip, captions in zip(clips, captions_of_clip)
        ]
    else:
        a2t_positions = argsort_loop_a2t((audio[clips] @ text.T).numpy(), captions_of_clip)
    a2t_seconds = time.perf_counter() - start

    return {
        "seconds": t2a_seconds * n_text / len(t2a_queries) + a2t_seconds * n_audio / len(clips),
        "t2a_queries": t2a_queries,
        "metrics": {**summarise("t2a", [[r] for r in t2a_ranks]), **summarise("a2t", a2t_positions)},
    }


def resident_bytes() -> tuple[int, int]:
    """(current, peak) resident set size of this process, from /proc/self/status."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def measure(function, *args) -> tuple[float, int, object]:
    """Wall-clock seconds, rise of the peak resident set size, and the result of ``function(*args)``."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # return freed memory, so that reusing it shows up as a rise
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current resident size
    rss_before, _ = resident_bytes()
    start = time.perf_counter()
    result = function(*args)
    seconds = time.perf_counter() - start
    return seconds, resident_bytes()[1] - rss_before, result


def matrix_product_alone(audio: torch.Tensor, text: torch.Tensor, block_rows: int = 1024) -> None:
    """Every score computed once, in blocks, and thrown away: the floor for any exact method."""
    for start in range(0, len(text), block_rows):
        text[start : start + block_rows] @ audio.T


def ours(audio: torch.Tensor, text: torch.Tensor, text_to_audio: np.ndarray | list) -> dict[str, float]:
    return retrieval_metrics_from_embeddings(audio, text, text_to_audio, ks=KS, map_cutoffs=(MAP_CUTOFF,))


def batched_loop_several_clips(audio: torch.Tensor, text: torch.Tensor, relevant: list[list[int]]) -> dict:
    """The argsort loop (scores by one batched product) with several relevant clips per caption."""
    clip_captions: list[list[int]] = [[] for _ in range(len(audio))]
    for caption, clips in enumerate(relevant):
        for clip in clips:
            clip_captions[clip].append(caption)
    t2a = argsort_loop_a2t((text @ audio.T).numpy(), [np.array(clips) for clips in relevant])
    with_captions = [clip for clip, captions in enumerate(clip_captions) if captions]
    a2t = argsort_loop_a2t(
        (audio[with_captions] @ text.T).numpy(), [np.array(clip_captions[clip]) for clip in with_captions]
    )
    return {**summarise("t2a", t2a, fractions=True), **summarise("a2t", a2t)}


def compare_several_clips(
    audio: torch.Tensor, text: torch.Tensor, text_to_audio: np.ndarray, repeats: int, check: bool
) -> None:
    """Time one vs several relevant clips per caption on the same embeddings, alternating, best of `repeats`."""
    relevant = several_relevant_clips(text_to_audio, len(audio))
    seconds = {"one": [], "several": []}
    for _ in range(repeats):
        for label, relevance in (("one", text_to_audio), ("several", relevant)):
            elapsed, _, metrics = measure(ours, audio, text, relevance)
            seconds[label].append(elapsed)
    one, several = min(seconds["one"]), min(seconds["several"])
    print(
        f"several relevant clips per caption ({np.mean([len(r) for r in relevant]):.2f} on average): "
        f"{several:.2f} s against {one:.2f} s with one clip per caption (best of {repeats}, alternating): "
        f"{several / one:.2f}x"
    )
    if check:
        baseline = batched_loop_several_clips(audio, text, relevant)
        mismatches = {
            k: (v, baseline[k]) for k, v in metrics.items() if not math.isclose(v, baseline[k], rel_tol=1e-12)
        }
        print(f"values identical to the batched-product loop ({len(metrics)} keys): {not mismatches}")
        assert set(metrics) == set(baseline) and not mismatches, f"values differ: {mismatches}"


def compare(name: str, n_audio: int, fraction: float) -> float:
    audio, text, text_to_audio = make_problem(n_audio)
    n_text = len(text)
    print(f"\n== {name}: {n_audio:,} clips x {n_text:,} captions, d = {EMBED_DIM}")
    ours_seconds, ours_bytes, ours_metrics = measure(ours, audio, text, text_to_audio)
    _, batched_bytes, batched = measure(run_baseline, audio, text, text_to_audio, fraction, False)
    _, per_query_bytes, per_query = measure(run_baseline, audio, text, text_to_audio, fraction, True)
    product_seconds, _, _ = measure(matrix_product_alone, audio, text)
    if fraction < 1:
        print(
            f"baselines timed on a random {fraction:.0%} of the clips ({round(fraction * n_audio):,} A2T queries) "
            f"and their {len(batched['t2a_queries']):,} captions (T2A queries), extrapolated linearly to all queries"
        )

    def memory(n_bytes: int) -> str:
        return "n/a (subset)" if fraction < 1 else f"{n_bytes / 2**20:.1f} MiB"

    print(f"{'method':<52}{'time (s)':>10}{'peak RSS rise':>16}{'time / ours':>13}")
    rows = [
        ("hf_atr retrieval_metrics_from_embeddings", ours_seconds, f"{ours_bytes / 2**20:.1f} MiB"),
        ("argsort loop, scores by one batched product", batched["seconds"], memory(batched_bytes)),
        ("argsort loop, scores per query (papers' code)", per_query["seconds"], memory(per_query_bytes)),
        ("(the score matrix product alone)", product_seconds, ""),
    ]
    for label, seconds, peak in rows:
        print(f"{label:<52}{seconds:>10.2f}{peak:>16}{seconds / ours_seconds:>12.2f}x")
    speedup = batched["seconds"] / ours_seconds
    print(
        f"speed-up over the batched-product loop {speedup:.1f}x, over the papers' loop "
        f"{per_query['seconds'] / ours_seconds:.1f}x (target >= {TARGET_SPEEDUP:.0f}x)"
    )

    if fraction < 1:
        # Our T2A metrics on the same query subset (the gallery is still every clip).
        subset = batched["t2a_queries"]
        checked = {
            k: v for k, v in ours(audio, text[subset], text_to_audio[subset]).items() if k.startswith("t2a_")
        }
        label = "T2A metrics of the timed query subset"
    else:
        checked, label = ours_metrics, "all metrics"
    # Any differing rank moves a metric by >= 1 / n_queries; 1e-12 only absorbs the order of the averaging.
    for baseline_name, baseline in (("batched-product loop", batched), ("papers' loop", per_query)):
        mismatches = {
            k: (v, baseline["metrics"][k])
            for k, v in checked.items()
            if not math.isclose(v, baseline["metrics"][k], rel_tol=1e-12)
        }
        print(f"values identical to the {baseline_name} ({label}, {len(checked)} keys): {not mismatches}")
        assert not mismatches, f"values differ from the {baseline_name}: {mismatches}"
    for key in ("t2a_R@1", "t2a_mAP@10", "t2a_mean_rank", "a2t_R@1", "a2t_mAP@10", "a2t_recall_fraction@5"):
        if key in checked:
            print(f"  {key:<22} ours {checked[key]:.6f}   baseline {batched['metrics'][key]:.6f}")
    compare_several_clips(
        audio, text, text_to_audio, repeats=3 if n_audio < 5_000 else 1, check=fraction == 1
    )
    return speedup


def compare_moments(n_queries: int, repeats: int = 3) -> float:
    """Moment retrieval metrics of `n_queries` random queries: ours (best of `repeats`) against the per-query loop."""
    predictions, references = random_moment_problem(0, n_queries)
    seconds = min(measure(moment_retrieval_metrics, predictions, references)[0] for _ in range(repeats))
    ours_metrics = moment_retrieval_metrics(predictions, references)
    loop_seconds, _, loop_metrics = measure(brute_force_moment_metrics, predictions, references)
    windows = sum(len(record["pred_relevant_windows"]) for record in predictions)
    print(
        f"\n== moment retrieval: {n_queries:,} queries, {windows:,} predicted windows\n"
        f"{'moment_retrieval_metrics (best of ' + str(repeats) + ')':<52}{seconds:>10.3f} s\n"
        f"{'per-query loop (tests/moment_reference.py)':<52}{loop_seconds:>10.3f} s"
        f"{loop_seconds / seconds:>12.1f}x"
    )
    mismatches = {
        k: (v, loop_metrics[k]) for k, v in ours_metrics.items() if abs(v - loop_metrics[k]) > 1e-12
    }
    print(f"values equal to the per-query loop's within 1e-12 ({len(ours_metrics)} keys): {not mismatches}")
    assert not mismatches, f"values differ: {mismatches}"
    return loop_seconds / seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one small problem (200 clips x 1,000 captions)")
    parser.add_argument(
        "--full-baseline", action="store_true", help="run the baseline on every query at 10k x 50k"
    )
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's default)")
    parser.add_argument(
        "--moments-only", action="store_true", help="only the moment retrieval row (10k queries)"
    )
    args = parser.parse_args()
    if args.moments_only:
        compare_moments(10_000)
        return
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} torch thread(s); NumPy's argsort is single-threaded"
    )
    # One-off start-up costs (thread pools, BLAS dispatch) are paid here, not by whichever method runs first.
    warm_up_audio, warm_up_text, warm_up_text_to_audio = make_problem(50)
    ours(warm_up_audio, warm_up_text, warm_up_text_to_audio)
    for per_query_scores in (False, True):
        run_baseline(warm_up_audio, warm_up_text, warm_up_text_to_audio, 1.0, per_query_scores)
    matrix_product_alone(warm_up_audio, warm_up_text)
    if args.quick:
        compare("quick", 200, 1.0)
        compare_moments(1_000)
        return
    speedups = [
        compare("Clotho-size", 1_045, 1.0),
        compare("10k x 50k", 10_000, 1.0 if args.full_baseline else 0.04),
    ]
    print(f"\nspeed-ups: {', '.join(f'{s:.1f}x' for s in speedups)}; target >= {TARGET_SPEEDUP:.0f}x")
    compare_moments(10_000)


if __name__ == "__main__":
    main()

"""Search at scale: exact search on a torch device and faiss's indexes (hf_atr's EmbeddingIndex), side by side.

For each corpus size (10k and 100k items of d = 512 on ``--device cpu``, the default; 100k and 1M on a GPU) in one
process:

* data: unit vectors drawn around 2,000 random cluster centres (real retrieval embeddings are
  clustered; i.i.d. Gaussian vectors are the worst case for any approximate index), queries drawn
  the same way (fresh points, not copies of indexed items);
* `faiss flat`: `EmbeddingIndex(kind="flat")` (faiss-cpu IndexFlatIP, exact): the reference of every row,
  for recall and speed;
* `device float32` / `device float16`: `EmbeddingIndex(device=--device, search_dtype=...)`, exact search on
  the device (`hf_atr.pipelines.device_search`: items held there, queries by matrix products, top-k by
  blocks of 65,536 items); its build is copying the items there, and its queries/s include moving the queries
  there and the hits back;
* `matmul+topk float32` / `matmul+topk float16`: the floor the device search is held to: a plain blocked
  `matmul` + `topk` (the same blocks, items already on the device, queries moved there and the hits back), with
  no tie rule (`torch.topk` breaks ties as it likes). It and the device search are timed in `--rounds`
  interleaved rounds, each counted by its fastest, and the device search's time over this one's is printed after
  the table (goal: within 1.15x);
* `ivf`: `EmbeddingIndex(kind="ivf")` (faiss IndexIVFFlat, sqrt(n) cells trained on 64 points each,
  nprobe cells searched);
* `hnsw`: `EmbeddingIndex(kind="hnsw")` (faiss IndexHNSWFlat, M = 32), up to `--hnsw-max` items
  (its build is the slowest part: minutes at 1M on few cores).

Printed per method: build time (s), queries per second, recall@10 = |top-10 ∩ faiss flat's top-10| / 10 averaged
over queries, and the speed ratio over faiss flat.

    python benchmarks/search.py                                  # --device cpu: 10k and 100k items
    python benchmarks/search.py --sizes 1000000                  # 1M items on the CPU (2 GiB; minutes)
    python benchmarks/search.py --device cuda --threads 16       # 100k and 1M items, on a GPU against faiss-cpu

    python benchmarks/search.py --dtypes float32 --rounds 5      # the device search against matmul+topk only
    python benchmarks/search.py --device cuda --threads 16 --queries 4096 --nprobe   # a GPU, no IVF rows

Measured on the project machine (2 shared cores, 1 thread, torch 2.13, faiss 1.15; loaded, so times are
noisy but each row's ratio is taken in the same run), `--device cpu`: see docs/search-and-sharing.md.
On a GPU: not measured here yet (an earlier prototype of the plain matmul + topk measured, at 1M x 512 on one
H100, 31,268 q/s in float32 and 113,664 q/s in float16 against 194 q/s for faiss-cpu IndexFlatIP on 16 threads).

Run from the repository root with hf_atr importable (``pip install -e .`` or ``PYTHONPATH=.``).
"""

from __future__ import annotations

import argparse
import time

import faiss
import numpy as np
import torch

from hf_atr.pipelines.device_search import DEFAULT_ITEM_BLOCK, DEFAULT_QUERY_BLOCK, SEARCH_DTYPES
from hf_atr.pipelines.index import EmbeddingIndex

EMBED_DIM = 512
TOP_K = 10
NUM_CENTRES = 2000
CLUSTER_SPREAD = 0.6
"""Noise norm relative to the (unit) centre: neighbours within a cluster are close but not duplicates."""


def clustered_unit_vectors(count: int, centres: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``(count, dim)`` unit vectors: a random centre plus Gaussian noise of norm about ``CLUSTER_SPREAD``."""
    dim = centres.shape[1]
    vectors = torch.empty(count, dim)
    for start in range(0, count, 100_000):
        stop = min(start + 100_000, count)
        choice = torch.randint(len(centres), (stop - start,), generator=generator)
        noise = torch.randn(stop - start, dim, generator=generator) * (CLUSTER_SPREAD / dim**0.5)
        vectors[start:stop] = torch.nn.functional.normalize(centres[choice] + noise, dim=1)
    return vectors


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    return float(
        np.mean([len(set(row) & set(reference)) / exact.shape[1] for row, reference in zip(found, exact)])
    )


def measure_index(
    items: torch.Tensor, queries: torch.Tensor, exact: np.ndarray | None, **options: object
) -> tuple[dict[str, float], np.ndarray]:
    """Build an ``EmbeddingIndex(**options)`` of ``items`` and time its search of ``queries``; recall against
    ``exact`` (the hits themselves when ``exact`` is ``None``: the reference)."""
    started = time.perf_counter()
    index = EmbeddingIndex(EMBED_DIM, **options)
    index.add(items, [str(i) for i in range(len(items))])
    index.search(
        queries[:1], TOP_K
    )  # builds the faiss structure (IVF training, HNSW graph) or fills the device
    if index.device is not None:
        synchronize(index.device)
    build = time.perf_counter() - started
    started = time.perf_counter()
    _, positions = index.search(queries, TOP_K)
    seconds = time.perf_counter() - started
    recall = 1.0 if exact is None else recall_at_k(positions, exact)
    return {"build_s": build, "qps": len(queries) / seconds, "recall@10": recall}, positions


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so that the clock reads what the device spent (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_matmul_topk(items: torch.Tensor, queries: torch.Tensor, k: int) -> torch.Tensor:
    """Positions ``(q, k)`` of the top-``k`` inner products of ``queries: (q, dim)`` (float32, on the host) with
    ``items: (n, dim)`` (on the device, in the dtype searched): blocks of ``DEFAULT_QUERY_BLOCK`` queries by
    ``DEFAULT_ITEM_BLOCK`` items, each block's ``topk`` kept and the candidates' ``topk`` taken at the end."""
    on_device = queries.to(items.device)
    hits = []
    for block in on_device.split(DEFAULT_QUERY_BLOCK):
        held = block.to(items.dtype)
        candidate_scores, candidate_positions = [], []
        for start in range(0, len(items), DEFAULT_ITEM_BLOCK):
            top = (held @ items[start : start + DEFAULT_ITEM_BLOCK].T).topk(k, dim=1)
            candidate_scores.append(top.values)
            candidate_positions.append(top.indices + start)
        best = torch.cat(candidate_scores, dim=1).topk(k, dim=1).indices
        hits.append(torch.cat(candidate_positions, dim=1).gather(1, best))
    return torch.cat(hits).cpu()


def measure_device_and_plain(
    items: torch.Tensor,
    queries: torch.Tensor,
    exact: np.ndarray,
    device: torch.device,
    dtype: str,
    rounds: int,
) -> tuple[dict[str, float], dict[str, float]]:
    """The device search (``EmbeddingIndex(device=..., search_dtype=dtype)``) and :func:`plain_matmul_topk` on the
    same device, timed in ``rounds`` interleaved rounds after a warm-up; queries/s from each one's fastest round
    (the least disturbed by other processes)."""
    started = time.perf_counter()
    index = EmbeddingIndex(EMBED_DIM, device=device, search_dtype=dtype)
    index.add(items, [str(i) for i in range(len(items))])
    index.search(queries[:1], TOP_K)  # fills the device
    synchronize(device)
    index_build = time.perf_counter() - started
    started = time.perf_counter()
    held = items.to(device=device, dtype=SEARCH_DTYPES[dtype])
    plain_matmul_topk(held, queries[:1], TOP_K)
    synchronize(device)
    plain_build = time.perf_counter() - started
    searches = {
        "device": lambda: index.search(queries, TOP_K)[1],
        "plain": lambda: plain_matmul_topk(held, queries, TOP_K).numpy(),
    }
    seconds: dict[str, list[float]] = {name: [] for name in searches}
    positions: dict[str, np.ndarray] = {}
    for _ in range(rounds):
        for name, search in searches.items():
            started = time.perf_counter()
            positions[name] = search()
            seconds[name].append(time.perf_counter() - started)
    return tuple(
        {
            "build_s": build,
            "qps": len(queries) / min(seconds[name]),
            "recall@10": recall_at_k(positions[name], exact),
        }
        for name, build in (("device", index_build), ("plain", plain_build))
    )


def run_size(
    count: int,
    num_queries: int,
    device: str,
    dtypes: list[str],
    rounds: int,
    hnsw_max: int,
    nprobes: list[int],
    seed: int,
) -> None:
    generator = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(NUM_CENTRES, EMBED_DIM, generator=generator), dim=1)
    items = clustered_unit_vectors(count, centres, generator)
    queries = clustered_unit_vectors(num_queries, centres, generator)

    results = {}
    results["faiss flat"], exact = measure_index(items, queries, None, kind="flat")
    for dtype in dtypes:
        results[f"{device} {dtype}"], results[f"matmul+topk {dtype}"] = measure_device_and_plain(
            items, queries, exact, torch.device(device), dtype, rounds
        )
    for nprobe in nprobes:
        results[f"ivf nprobe={nprobe}"] = measure_index(items, queries, exact, kind="ivf", nprobe=nprobe)[0]
    if count <= hnsw_max:
        results["hnsw ef=64"] = measure_index(items, queries, exact, kind="hnsw", ef_search=64)[0]

    print(f"\n{count:,} items x {EMBED_DIM}-d, {num_queries:,} queries, top-{TOP_K}")
    print(f"  {'method':<18} {'build s':>9} {'queries/s':>11} {'recall@10':>10} {'vs faiss flat':>14}")
    baseline = results["faiss flat"]["qps"]
    for name, values in results.items():
        print(
            f"  {name:<18} {values['build_s']:>9.2f} {values['qps']:>11,.0f} {values['recall@10']:>10.4f} "
            f"{values['qps'] / baseline:>13.2f}x"
        )
    slowdowns = [
        f"{dtype} {results[f'matmul+topk {dtype}']['qps'] / results[f'{device} {dtype}']['qps']:.2f}x"
        for dtype in dtypes
    ]
    print(f"  device search time / plain matmul+topk time: {', '.join(slowdowns)}")
    del items


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device of the exact device search (default: cpu)"
    )
    parser.add_argument("--quick", action="store_true", help="10k and 100k items only (the CPU default)")
    parser.add_argument(
        "--sizes", type=int, nargs="+", help="corpus sizes (default: 10k 100k; on a GPU 100k 1M)"
    )
    parser.add_argument("--queries", type=int, default=1000, help="queries per size (default: 1000)")
    parser.add_argument(
        "--hnsw-max", type=int, default=10_000, help="largest corpus to build HNSW for (default: 10,000)"
    )
    parser.add_argument(
        "--nprobe",
        type=int,
        nargs="*",
        default=[8, 32],
        help="IVF cells searched per query (none: no IVF row)",
    )
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=sorted(SEARCH_DTYPES),
        default=["float32", "float16"],
        help="precisions of the device search (default: both; float16 is slow on a CPU)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved timing rounds of the device search and matmul+topk; the fastest counts (default: 3)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch and faiss CPU threads (default: 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    on_cpu = torch.device(args.device).type == "cpu"
    sizes = args.sizes or ([10_000, 100_000] if args.quick or on_cpu else [100_000, 1_000_000])
    accelerator = "" if on_cpu else f"; {torch.cuda.get_device_name(torch.device(args.device))}"
    print(f"threads: {args.threads}; torch {torch.__version__}, faiss {faiss.__version__}{accelerator}")
    for count in sizes:
        run_size(
            count, args.queries, args.device, args.dtypes, args.rounds, args.hnsw_max, args.nprobe, args.seed
        )


if __name__ == "__main__":
    main()

"""Search at scale: hf_atr's EmbeddingIndex (faiss) vs exact brute-force torch search, side by side.

For each corpus size (10k, 100k and 1M items of d = 512 by default) in one process:

* data: unit vectors drawn around 2,000 random cluster centres (real retrieval embeddings are
  clustered; i.i.d. Gaussian vectors are the worst case for any approximate index), queries drawn
  the same way (fresh points, not copies of indexed items);
* exact reference: torch, queries in blocks of 256, `scores = queries @ itemsᵀ` then `topk(10)`;
* `flat`: `EmbeddingIndex(kind="flat")` (faiss IndexFlatIP, exact);
* `ivf`: `EmbeddingIndex(kind="ivf")` (faiss IndexIVFFlat, sqrt(n) cells trained on 64 points each,
  nprobe cells searched);
* `hnsw`: `EmbeddingIndex(kind="hnsw")` (faiss IndexHNSWFlat, M = 32), up to `--hnsw-max` items
  (its build is the slowest part: minutes at 1M on few cores).

Printed per method: build time (s; for torch, stacking the items into one tensor), queries per second,
recall@10 = |top-10 ∩ exact top-10| / 10 averaged over queries, and the speed ratio over torch.

    python benchmarks/search.py --quick         # 10k and 100k items (a minute)
    python benchmarks/search.py                 # adds 1M items (2 GiB of float32; several minutes)

Measured on the project machine (2 shared cores, 1 thread, torch 2.13, faiss 1.15; loaded, so times are
noisy but each row's ratio is taken in the same run): queries/s vs torch brute force, recall@10 —

    10k:  torch 2,007; flat 1.3x (1.0); ivf nprobe=8 2.0x (0.66), nprobe=32 0.4x (0.84); hnsw 0.4x (0.97)
    100k: torch 172;   flat 1.3x (1.0); ivf nprobe=8 4.3x (1.0), nprobe=32 1.1x (1.0)
    1M:   torch 5;     flat 3.1x (1.0); ivf nprobe=8 98x (1.0, built in 112 s), nprobe=32 18x (1.0)

(At 10k the 2,000 clusters hold 5 items each, so true neighbours straddle IVF cells and recall drops;
from 100k on each cluster is dense and IVF recall@10 is 1.0 on this data, an optimistic case.)

Run from the repository root with hf_atr importable (``pip install -e .`` or ``PYTHONPATH=.``).
"""

from __future__ import annotations

import argparse
import time

import faiss
import numpy as np
import torch

from hf_atr.pipelines.index import EmbeddingIndex

EMBED_DIM = 512
TOP_K = 10
NUM_CENTRES = 2000
CLUSTER_SPREAD = 0.6
"""Noise norm relative to the (unit) centre: neighbours within a cluster are close but not duplicates."""
QUERY_BLOCK = 256


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


def torch_topk(items: torch.Tensor, queries: torch.Tensor, k: int) -> torch.Tensor:
    """Exact top-``k`` item positions ``(q, k)`` by blocks of queries."""
    return torch.cat([(block @ items.T).topk(k, dim=1).indices for block in queries.split(QUERY_BLOCK)])


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    return float(
        np.mean([len(set(row) & set(reference)) / exact.shape[1] for row, reference in zip(found, exact)])
    )


def measure_index(
    items: torch.Tensor, queries: torch.Tensor, exact: np.ndarray, kind: str, **options: int
) -> dict[str, float]:
    started = time.perf_counter()
    index = EmbeddingIndex(EMBED_DIM, kind=kind, **options)
    index.add(items, [str(i) for i in range(len(items))])
    index.search(queries[:1], TOP_K)  # builds the faiss structure (IVF training, HNSW graph)
    build = time.perf_counter() - started
    started = time.perf_counter()
    _, positions = index.search(queries, TOP_K)
    seconds = time.perf_counter() - started
    return {"build_s": build, "qps": len(queries) / seconds, "recall@10": recall_at_k(positions, exact)}


def run_size(count: int, num_queries: int, hnsw_max: int, nprobes: list[int], seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(NUM_CENTRES, EMBED_DIM, generator=generator), dim=1)
    items = clustered_unit_vectors(count, centres, generator)
    queries = clustered_unit_vectors(num_queries, centres, generator)

    started = time.perf_counter()
    stacked = items.contiguous()
    torch_build = time.perf_counter() - started
    torch_topk(stacked, queries[:QUERY_BLOCK], TOP_K)  # warm-up
    started = time.perf_counter()
    exact = torch_topk(stacked, queries, TOP_K).numpy()
    torch_qps = num_queries / (time.perf_counter() - started)

    results = {"torch (exact)": {"build_s": torch_build, "qps": torch_qps, "recall@10": 1.0}}
    results["flat"] = measure_index(items, queries, exact, "flat")
    for nprobe in nprobes:
        results[f"ivf nprobe={nprobe}"] = measure_index(items, queries, exact, "ivf", nprobe=nprobe)
    if count <= hnsw_max:
        results["hnsw ef=64"] = measure_index(items, queries, exact, "hnsw", ef_search=64)

    print(f"\n{count:,} items x {EMBED_DIM}-d, {num_queries:,} queries, top-{TOP_K}")
    print(f"  {'method':<18} {'build s':>9} {'queries/s':>11} {'recall@10':>10} {'speed vs torch':>15}")
    for name, values in results.items():
        print(
            f"  {name:<18} {values['build_s']:>9.2f} {values['qps']:>11,.0f} {values['recall@10']:>10.4f} "
            f"{values['qps'] / torch_qps:>14.2f}x"
        )
    del items, stacked


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="10k and 100k items only")
    parser.add_argument("--sizes", type=int, nargs="+", help="corpus sizes (overrides --quick)")
    parser.add_argument("--queries", type=int, default=1000, help="queries per size (default: 1000)")
    parser.add_argument(
        "--hnsw-max", type=int, default=10_000, help="largest corpus to build HNSW for (default: 10,000)"
    )
    parser.add_argument("--nprobe", type=int, nargs="+", default=[8, 32], help="IVF cells searched per query")
    parser.add_argument("--threads", type=int, default=1, help="torch and faiss threads (default: 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    sizes = args.sizes or ([10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000])
    print(f"threads: {args.threads}; torch {torch.__version__}, faiss {faiss.__version__}")
    for count in sizes:
        run_size(count, args.queries, args.hnsw_max, args.nprobe, args.seed)


if __name__ == "__main__":
    main()

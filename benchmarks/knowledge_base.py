"""ASK knowledge base: build/refresh time, per-step search cost (faiss vs brute-force torch top-K), ASK step time.

Measured side by side in one run on random unit embeddings (the cost does not depend on their values):

1. building a base of ``--pairs`` pairs × ``--dim`` (normalise, k-means into ``N_c`` prototypes, four flat
   inner-product indexes) -- what every refresh costs on top of re-encoding the source;
2. the four top-K searches one ASK training step makes (audio/text × fine/coarse, ``--batch`` queries each),
   ``KnowledgeBase.search`` with ``backend="faiss"`` (``IndexFlatIP``, the library reference) against the
   default ``backend="torch"`` (blocked matrix product + ``torch.topk``);
3. the objective's forward + backward, ``ask`` with each search backend against ``contrastive``, alone and
   inside a full optimizer step of the tiny demo dual encoder (``hf_atr.demo``, projection ``--dim``).

Run: ``OMP_NUM_THREADS=1 python benchmarks/knowledge_base.py`` (add ``--pairs 5000`` for a quick look).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.knowledge.knowledge_base import KnowledgeBase
from hf_atr.modeling_atr import AtrDualEncoderModel
from hf_atr.objectives.ask import AskObjective
from hf_atr.objectives.contrastive import ContrastiveObjective


def median_seconds(function: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        function()
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def unit_rows(rows: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    return F.normalize(torch.randn(rows, dim, generator=generator), dim=-1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--prototypes", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--neighbours", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(args.seed)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); base {args.pairs} pairs x {args.dim}, "
        f"N_c={args.prototypes}, batch {args.batch}, K={args.neighbours}"
    )

    audio = unit_rows(args.pairs, args.dim, generator)
    text = F.normalize(audio + unit_rows(args.pairs, args.dim, generator), dim=-1)
    started = time.perf_counter()
    base = KnowledgeBase.from_embeddings(audio, text, num_prototypes=args.prototypes, seed=args.seed)
    build_seconds = time.perf_counter() - started
    print("\n1. build / refresh (excluding re-encoding the source)")
    print(f"   full build (normalise + k-means) {build_seconds:8.2f} s")

    queries = {
        "audio": unit_rows(args.batch, args.dim, generator),
        "text": unit_rows(args.batch, args.dim, generator),
    }

    def search_step(backend: str) -> Callable[[], None]:
        def step() -> None:
            for granularity in ("fine", "coarse"):
                for modality, query in queries.items():
                    base.search(
                        query, modality=modality, granularity=granularity, k=args.neighbours, backend=backend
                    )

        return step

    for modality, query in queries.items():
        faiss_indices = base.search(query, modality=modality, k=args.neighbours, backend="faiss")[1]
        torch_indices = base.search(query, modality=modality, k=args.neighbours, backend="torch")[1]
        agreement = (faiss_indices == torch_indices).float().mean().item()
        print(
            f"   (check) faiss and torch top-{args.neighbours} agree on {100 * agreement:.1f}% of {modality} ids"
        )
    faiss_seconds = median_seconds(search_step("faiss"), args.repeats)
    torch_seconds = median_seconds(search_step("torch"), args.repeats)
    print("\n2. the 4 searches of one training step")
    print(f"   faiss IndexFlatIP                {1e3 * faiss_seconds:8.2f} ms")
    print(f"   torch matmul + topk (default)    {1e3 * torch_seconds:8.2f} ms")
    print(f"   speed-up torch over faiss        {faiss_seconds / torch_seconds:8.2f}x")

    objectives = {"contrastive": ContrastiveObjective(temperature=0.07)}
    for backend in ("torch", "faiss"):
        ask = AskObjective(
            num_neighbours=args.neighbours,
            num_prototypes=args.prototypes,
            temperature=0.07,
            search_backend=backend,
        )
        ask.knowledge_base = base
        objectives[f"ask ({backend} search)"] = ask

    def objective_step(objective: torch.nn.Module) -> Callable[[], None]:
        def step() -> None:
            audio_embeds = queries["audio"].clone().requires_grad_()
            text_embeds = queries["text"].clone().requires_grad_()
            objective(audio_embeds, text_embeds).loss.backward()

        return step

    print("\n3. objective forward + backward on (batch, dim) embeddings")
    seconds = {
        name: median_seconds(objective_step(objective), args.repeats)
        for name, objective in objectives.items()
    }
    for name, value in seconds.items():
        print(f"   {name:<32} {1e3 * value:8.2f} ms  ({value / seconds['contrastive']:7.1f}x contrastive)")

    feature_extractor = tiny_feature_extractor()
    torch.manual_seed(args.seed)
    model = AtrDualEncoderModel(tiny_model_config(feature_extractor, 3000, projection_dim=args.dim))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    features = torch.randn(
        args.batch, feature_extractor.max_length, feature_extractor.num_mel_bins, generator=generator
    )
    input_ids = torch.randint(5, 3000, (args.batch, 16), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    model.train()

    def training_step(objective: torch.nn.Module) -> Callable[[], None]:
        def step() -> None:
            outputs = model(input_values=features, input_ids=input_ids, attention_mask=attention_mask)
            objective(outputs.audio_embeds, outputs.text_embeds, model=model).loss.backward()
            optimizer.step()
            optimizer.zero_grad()

        return step

    repeats = max(3, args.repeats // 4)
    print("\n   full optimizer step, tiny demo dual encoder (AST+BERT, hidden 64)")
    seconds = {
        name: median_seconds(training_step(objective), repeats) for name, objective in objectives.items()
    }
    for name, value in seconds.items():
        print(f"   {name:<32} {1e3 * value:8.1f} ms  ({value / seconds['contrastive']:7.2f}x contrastive)")


if __name__ == "__main__":
    main()

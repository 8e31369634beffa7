"""Retrieval on the demo's test split, as the benchmarks that compare one model's variants measure it.

Shared by ``half_precision.py`` (float32 against bfloat16 and float16) and ``export.py`` (torch against its ONNX
export, float32 and int8). For one retrieval pipeline (:func:`measure`):

1. R@1 and R@10 in both directions on the demo's test split (its clips and English captions, as the demo's index
   holds them), by :class:`hf_atr.evaluation.evaluator.RetrievalEvaluator`: the model's own protocol;
2. the demo index rebuilt by that pipeline (``pipe.index`` over the test clips and their captions): every caption
   searched for its top-10 clips, every clip for its top-10 captions. :func:`overlap` then compares those lists
   with a reference variant's: ``|top-10 ∩ reference's top-10| / 10`` averaged over the queries.
"""

from __future__ import annotations

from pathlib import Path

from datasets import Dataset

from hf_atr.demo import run_demo
from hf_atr.evaluation.evaluator import RetrievalEvaluator
from hf_atr.pipelines.index import EmbeddingIndex
from hf_atr.pipelines.persistence import AUDIO_INDEX_NAME, TEXT_INDEX_NAME

TOP_K = 10
METRICS = ("t2a_R@1", "t2a_R@10", "a2t_R@1", "a2t_R@10")
TABLE_COLUMNS = ("T2A R@1", "T2A R@10", "A2T R@1", "A2T R@10", "top-10 overlap with {reference}: T2A", "A2T")


def ensure_demo(demo_dir: Path) -> None:
    """Build the demo in ``demo_dir`` with ``hf-atr demo``'s defaults unless it holds one already."""
    if not (demo_dir / "index" / f"{AUDIO_INDEX_NAME}.json").is_file():
        print(f"Building the demo in {demo_dir} (hf-atr demo)...", flush=True)
        run_demo(demo_dir, show_progress=False)


def demo_split(demo_dir: Path) -> tuple[Path, list[Path], list[str], list[str], Dataset]:
    """The demo's audio folder and test clips (its index's files), its English captions with their ids, and the split
    as a dataset."""
    index = EmbeddingIndex.load(demo_dir / "index", AUDIO_INDEX_NAME)
    captions = EmbeddingIndex.load(demo_dir / "index", TEXT_INDEX_NAME)
    files = [Path(index.path_of(item_id)) for item_id in dict.fromkeys(index.ids)]
    by_clip: dict[str, list[str]] = {}
    for caption_id, caption in zip(captions.ids, captions.captions):
        by_clip.setdefault(caption_id.rpartition("#")[0], []).append(caption)
    rows = Dataset.from_dict(
        {
            "audio_id": [path.stem for path in files],
            "audio": [{"bytes": path.read_bytes(), "path": str(path)} for path in files],
            "captions": [by_clip[path.stem] for path in files],
        }
    )
    return Path(index.root), files, captions.ids, captions.captions, rows


def top_ids(pipe, queries, top_k: int = TOP_K) -> list[list[str]]:
    return [[hit["id"] for hit in pipe(query, top_k=top_k)] for query in queries]


def overlap(found: list[list[str]], reference: list[list[str]]) -> float:
    return sum(len(set(a) & set(b)) for a, b in zip(found, reference)) / (TOP_K * len(reference))


def measure(pipe, split: tuple, queries: list[str] | None = None) -> dict:
    """``pipe``'s metrics (:data:`METRICS`) on the demo's test split (``split``: :func:`demo_split`'s tuple), and its
    top-10 ids (``"t2a"``: per caption of ``queries``, default all; ``"a2t"``: per clip) in the test split's index
    rebuilt by ``pipe``."""
    audio_dir, files, caption_ids, captions, rows = split
    metrics = RetrievalEvaluator(rows, pipe.processor, split="test", batch_size=32)(pipe.model)
    pipe.index(files, root=audio_dir, show_progress=False)
    pipe.index(captions, ids=caption_ids, show_progress=False)
    return {
        "metrics": {key: metrics[key] for key in METRICS},
        "t2a": top_ids(pipe, captions if queries is None else queries),
        "a2t": top_ids(pipe, [str(path) for path in files]),
    }


def table_cells(result: dict, reference: dict) -> list[str]:
    """The cells of :data:`TABLE_COLUMNS` for one variant's :func:`measure` against the reference variant's."""
    percents = [f"{100 * result['metrics'][key]:.1f}" for key in METRICS]
    return percents + [f"{overlap(result[way], reference[way]):.3f}" for way in ("t2a", "a2t")]

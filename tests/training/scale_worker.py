"""Run by test_distributed.py under ``torchrun --nproc_per_node 2``: the scale features on two gloo processes.

For every objective: two float64 steps with DDP (``find_unused_parameters=False``, the default), recording before
each optimizer step the trainable parameters without a gradient, then the same two steps gradient-cached; rank 0
saves both parameter sets and both objective states (DART's EMA). Then a streamed run over four shards, recording the clips each rank collated.

Usage: torchrun --standalone --nproc_per_node 2 scale_worker.py OUT_DIR
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import torch.distributed as dist
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tiny_models import feature_dataset, make_model, make_processor, training_args  # noqa: E402
from training_setups import Float64Batches, exact_model, objective_setup  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from hf_atr import AtrTrainer  # noqa: E402
from hf_atr.objectives.registry import available_objectives  # noqa: E402
from hf_atr.training.collator import AtrDataCollator  # noqa: E402
from hf_atr.training.streaming import StreamingPairs  # noqa: E402


class GradientCheck(TrainerCallback):
    def __init__(self) -> None:
        self.missing: list[list[str]] = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.missing.append(
            [
                name
                for name, parameter in model.named_parameters()
                if parameter.requires_grad and parameter.grad is None
            ]
        )


def train_objective(name: str, output_dir: Path, embedding_chunk_size: int | None) -> tuple[dict, dict, list]:
    processor = make_processor()
    objective, dataset, collator, callbacks = objective_setup(
        name, processor, num_clips=16, knowledge_base="fixed"
    )
    model = exact_model(processor, name)
    check = GradientCheck()
    trainer = AtrTrainer(
        model=model,
        args=training_args(output_dir, max_steps=2, per_device_train_batch_size=4, dataloader_drop_last=True),
        train_dataset=dataset,
        processing_class=processor,
        objective=objective,
        data_collator=Float64Batches(collator or AtrDataCollator(processor)),
        callbacks=[*callbacks, check],
        embedding_chunk_size=embedding_chunk_size,
    )
    assert trainer.args.ddp_find_unused_parameters is False
    trainer.train()
    state, objective_state = (
        {key: tensor.detach().clone().contiguous() for key, tensor in module.state_dict().items()}
        for module in (model, objective)
    )
    trainer.model_wrapped = trainer.model  # drop the DDP wrapper before the next trainer builds its own
    trainer.accelerator.free_memory()
    gc.collect()
    return state, objective_state, check.missing


class RecordingCollator(AtrDataCollator):
    """Records the clips this process collates (the stream is read in the main process: no workers)."""

    def __call__(self, rows):
        self.collated = [*getattr(self, "collated", []), *(row["audio_id"] for row in rows)]
        return super().__call__(rows)


def main() -> None:
    out_dir = Path(sys.argv[1])
    report: dict = {"missing": {}}
    for name in available_objectives():
        for mode, chunk in (("whole", None), ("cached", 2)):
            state, objective_state, missing = train_objective(name, out_dir / f"{name}-{mode}", chunk)
            if mode == "whole":
                report["missing"][name] = missing
            if dist.get_rank() == 0:
                save_file(state, str(out_dir / f"{name}-{mode}.safetensors"))
                save_file(objective_state, str(out_dir / f"{name}-{mode}.objective.safetensors"))

    processor = make_processor()
    collator = RecordingCollator(processor)
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(out_dir / "stream", max_steps=2, per_device_train_batch_size=4),
        train_dataset=StreamingPairs(
            feature_dataset(16).to_iterable_dataset(num_shards=4), shuffle_buffer_size=4
        ),
        processing_class=processor,
        data_collator=collator,
    )
    trainer.train()
    collated = [None] * dist.get_world_size()
    dist.all_gather_object(collated, collator.collated)
    report["collated"] = collated
    if dist.get_rank() == 0:
        (out_dir / "report.json").write_text(json.dumps(report))
    trainer.end()


if __name__ == "__main__":
    main()

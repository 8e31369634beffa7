"""Train a tiny model for a few steps with each objective given and write its losses; run under torchrun by
test_distributed.py. One process (or one torchrun job) trains every objective in turn, which saves starting the
interpreters once per objective.

Usage: [torchrun --standalone --nproc_per_node N] distributed_worker.py OUT_DIR PER_DEVICE_BATCH DEVICE
OBJECTIVE:SCORING [OBJECTIVE:SCORING ...] (DEVICE: cpu for gloo, cuda for NCCL); writes OUT_DIR/OBJECTIVE.json
(and OUT_DIR/OBJECTIVE.ranks.json under several processes).
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tiny_models import feature_dataset, make_model, make_processor, training_args  # noqa: E402

from hf_atr import AtrTrainer  # noqa: E402


def train(out_path: Path, per_device_batch: int, objective: str, scoring: str, device: str) -> AtrTrainer:
    """Train ``objective`` from seed 0 and write what the test compares; returns the trainer."""
    torch.manual_seed(0)
    processor = make_processor()
    model = make_model(processor=processor, objective={"name": objective}, scoring=scoring, seed=0)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    trainer = AtrTrainer(
        model=model,
        args=training_args(
            out_path.parent / f"trainer-{objective}",
            per_device_train_batch_size=per_device_batch,
            max_steps=4,
            logging_steps=1,
            dataloader_drop_last=True,
            use_cpu=device == "cpu",
        ),
        train_dataset=feature_dataset(64),
        processing_class=processor,
    )
    seen_batches = []
    forward = trainer.objective.forward

    def recording_forward(audio_embeds, text_embeds, *, batch=None, model=None):
        seen_batches.append(list(batch["audio_ids"]))
        return forward(audio_embeds, text_embeds, batch=batch, model=model)

    trainer.objective.forward = recording_forward
    trainer.train()
    if trainer.is_world_process_zero():
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        parameters = {name: tensor.double().sum().item() for name, tensor in model.state_dict().items()}
        state = {name: tensor.tolist() for name, tensor in trainer.objective.state_dict().items()}
        out_path.write_text(
            json.dumps(
                {
                    "losses": losses,
                    "parameters": parameters,
                    "objective_state": state,
                    "batches": seen_batches,
                }
            )
        )
    if torch.distributed.is_initialized():
        reliability = trainer.objective.state_dict()
        gathered = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(gathered, {k: v.tolist() for k, v in reliability.items()})
        if trainer.is_world_process_zero():
            out_path.with_suffix(".ranks.json").write_text(json.dumps(gathered))
    return trainer


def main() -> None:
    out_dir, per_device_batch, device, runs = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    for run in runs:
        objective, scoring = run.split(":")
        # The previous run's trainer (and its DDP wrapper) is dropped here, while the process group lives on.
        trainer = train(out_dir / f"{objective}.json", per_device_batch, objective, scoring, device)
    trainer.end()
    wrappers = [o for o in gc.get_objects() if isinstance(o, torch.nn.parallel.DistributedDataParallel)]
    assert not wrappers, "AtrTrainer.end() left a DDP wrapper (and its reducer's process group) alive"
    assert not torch.distributed.is_initialized()


if __name__ == "__main__":
    main()

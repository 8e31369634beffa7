"""gather_rows / gather_batch_metadata in a real 2-process gloo group, with unequal row counts."""

from __future__ import annotations

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from gather_worker import gather_worker

from hf_atr.distributed import is_distributed


@pytest.mark.slow
def test_gather_rows_concatenates_in_rank_order_and_sums_gradients(tmp_path):
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(gather_worker, args=(2, f"file://{tmp_path / 'store'}", results), nprocs=2, join=True)
    for rank in (0, 1):
        assert results[rank]["distributed"]
        assert results[rank]["gathered"] == [[1.0, 1.0]] * 3 + [[2.0, 2.0]] * 2
        assert results[rank]["audio_ids"] == ["r0c0", "r0c1", "r0c2", "r1c0", "r1c1"]
        assert results[rank]["caption_indices"] == [0, 1, 2, 0, 1]
        assert results[rank]["k"] == 2
    # Each rank computed the same loss over all 5 rows; a row's gradient is the sum over both ranks (2 × weight).
    assert results[0]["grad"] == [[2.0, 2.0], [4.0, 4.0], [6.0, 6.0]]
    assert results[1]["grad"] == [[8.0, 8.0], [10.0, 10.0]]


def test_a_single_process_is_not_distributed_even_inside_a_process_group(tmp_path):
    """Without a group, and in a group of one, the trainer must not gather (the 2-process case is above)."""
    assert not dist.is_initialized() and not is_distributed()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert dist.is_initialized() and not is_distributed()
    finally:
        dist.destroy_process_group()

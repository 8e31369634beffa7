"""Audio model inputs of a batch: stored features stacked as the model takes them, the extractor's mask renamed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_atr.audio_batches import model_audio_inputs, model_tensor, stack_feature


def test_model_tensor_gives_float32_int64_and_bools_from_read_only_arrays():
    floats = np.arange(6, dtype=np.float64).reshape(2, 3)
    floats.setflags(write=False)  # as an Arrow buffer hands it over
    assert model_tensor(floats).dtype == torch.float32
    torch.testing.assert_close(model_tensor(floats), torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert model_tensor(np.array([1, 2], dtype=np.int32)).dtype == torch.int64
    assert model_tensor(np.array([True, False])).dtype == torch.bool


def test_the_extractor_mask_is_renamed_and_frames_that_vary_are_padded():
    inputs = model_audio_inputs({"input_values": 1, "padding_mask": 2, "attention_mask": 3, "is_longer": 4})
    assert inputs == {"input_values": 1, "audio_attention_mask": 3, "is_longer": 4}
    stacked = stack_feature(
        [[[1.0]], [[2.0], [3.0]]], "input_features", ["a.wav", "b.wav"], padding_value=-1.0
    )
    torch.testing.assert_close(stacked, torch.tensor([[[1.0], [-1.0]], [[2.0], [3.0]]]))
    with pytest.raises(ValueError, match="a.wav"):
        stack_feature(
            [[[1.0, 0.0]], [[2.0], [3.0]]], "input_features", ["a.wav", "b.wav"], padding_value=-1.0
        )

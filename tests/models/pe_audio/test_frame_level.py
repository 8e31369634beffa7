"""Frame-level embeddings: a model converted from a ``PeAudioFrameLevelModel`` checkpoint embeds audio
every 40 ms, equal to transformers' model, and an index of its frames finds an event in a long recording at frame
resolution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pe_audio_planting import plant_tone_caption
from ranking_margin import clear_best_among
from synthetic_audio import recording_with_event
from tiny_models import PE_AUDIO_SAMPLING_RATE, save_converted_pe_audio, save_tiny_pe_audio_checkpoint
from transformers import PeAudioFrameLevelModel, PeAudioProcessor, pipeline

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.data.audio import encode_wav
from hf_atr.frame_encoding import CONTEXT_SECONDS
from hf_atr.pipelines.retrieval_pipeline import register_pipeline
from hf_atr.windowing import Windowing

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

RATE = PE_AUDIO_SAMPLING_RATE
FRAME = 1 / 25
ONE_FRAME = FRAME + 1e-9
"""One frame's error, up to the rounding of spans summed frame by frame."""
EVENT_AT, EVENT_SECONDS = 40.2, 0.5
""":func:`recording_with_event`: a 0.5-s 1-kHz tone at 40.2 s of a 60-s noise recording."""
CAPTION = "a tone"


@pytest.fixture(scope="module")
def frame_dir(tmp_path_factory):
    return save_converted_pe_audio(tmp_path_factory.mktemp("pe-frames"), frame_level=True)


def test_frame_embeddings_and_logits_equal_pe_audio_frame_level_model(frame_dir):
    model = AtrDualEncoderModel.from_pretrained(frame_dir).eval()
    processor = AtrProcessor.from_pretrained(frame_dir)
    assert model.config.audio_frame_rate == 25.0
    rng = np.random.default_rng(0)
    clips = [(0.1 * rng.standard_normal(samples)).astype(np.float32) for samples in (30_000, 12_000)]
    pe_dir = frame_dir.parent / "pe-av"
    pe_processor = PeAudioProcessor.from_pretrained(pe_dir)
    audio = pe_processor.feature_extractor(clips, sampling_rate=RATE, return_tensors="pt")
    text = pe_processor.tokenizer(["a dog barks", "rain"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = PeAudioFrameLevelModel.from_pretrained(pe_dir).eval()(**audio, **text)
        inputs = processor(audio=clips, text=["a dog barks", "rain"])
        frames, mask = model.get_audio_frame_features(
            inputs["input_values"], None, inputs["audio_attention_mask"]
        )
        text_embeds = model.get_text_features(inputs["input_ids"], inputs["attention_mask"])
    assert frames.shape == expected.audio_embeds.shape == (2, 16, model.config.projection_dim)
    assert mask.sum(dim=1).tolist() == [16, 7]  # 30,720 and 13,440 valid samples: 16 and 7 frames of 1920
    assert (frames - expected.audio_embeds).abs().max() < 1e-6
    scale, bias = model.scoring_head.logit_scale, model.scoring_head.logit_bias
    frame_logits = torch.einsum("afd,td->atf", frames, text_embeds) * scale + bias
    assert (frame_logits - expected.logits_audio_text).abs().max() < 1e-5


def test_a_clip_level_checkpoint_has_no_frames(tmp_path):
    save_tiny_pe_audio_checkpoint(tmp_path)
    model = AtrDualEncoderModel.from_pe_audio(tmp_path)
    assert model.config.audio_frame_rate is None
    with pytest.raises(
        ValueError, match=r"no frame-level audio embeddings \(config.audio_frame_rate is None\)"
    ):
        model.get_audio_frame_features(torch.zeros(1, 1, 1920))


@pytest.mark.slow
def test_an_event_in_a_60_s_recording_is_found_within_one_frame(frame_dir, tmp_path):
    register_pipeline()
    pipe = pipeline("audio-text-retrieval", model=str(frame_dir), windowing=Windowing(frame_seconds=FRAME))
    recording, query = recording_with_event(60, EVENT_AT, RATE)
    plant_tone_caption(pipe.model, pipe.processor, query, CAPTION)
    (tmp_path / "field.wav").write_bytes(encode_wav(recording, RATE, subtype="FLOAT"))
    index = pipe.index([str(tmp_path / "field.wav")], show_progress=False)
    assert index.frame_seconds == FRAME and len(index) == 1500  # 60 s, one entry per 40-ms frame
    spans = np.array(index.spans)
    np.testing.assert_allclose(spans[:, 1] - spans[:, 0], FRAME, rtol=1e-9)
    # Stated tolerance: the recording's first and last second are left out. There the random waveform encoder
    # reads the padding at the recording's ends (no audio to give it context), and its outermost frames score
    # highest under the planted direction; inside, every frame is read with a second of audio on both sides.
    inside = (spans[:, 0] >= CONTEXT_SECONDS) & (spans[:, 1] <= 60 - CONTEXT_SECONDS)
    text = pipe.model.get_text_features(**pipe.processor(text=[CAPTION]))[0].detach()
    scores = (torch.from_numpy(index.embeddings) @ text).numpy()
    in_event = (spans[inside, 0] >= EVENT_AT - ONE_FRAME) & (
        spans[inside, 1] <= EVENT_AT + EVENT_SECONDS + ONE_FRAME
    )
    best = spans[inside][clear_best_among(scores[inside], in_event)]
    assert best[0] >= EVENT_AT - ONE_FRAME and best[1] <= EVENT_AT + EVENT_SECONDS + ONE_FRAME
    # Frames above half-way from the median (noise) to the best: the tone's 0.5 s, edges within a frame.
    halfway = (np.median(scores[inside]) + scores[inside].max()) / 2
    above = spans[inside & (scores > halfway)]
    assert abs(above[:, 0].min() - EVENT_AT) <= ONE_FRAME
    # Stated tolerance for the end: 5 frames (0.2 s); the tone's last frames score lower under the planted
    # direction (measured: the run ends 0.14-0.18 s early).
    assert abs(above[:, 1].max() - (EVENT_AT + EVENT_SECONDS)) <= 5 * ONE_FRAME
    # Pooled to 0.2 s: entries (and hits) carry spans on that grid; the best inside one holds the event.
    coarse = pipeline("audio-text-retrieval", model=str(frame_dir), windowing=Windowing(frame_seconds=0.2))
    plant_tone_caption(coarse.model, coarse.processor, query, CAPTION)
    coarse_index = coarse.index([str(tmp_path / "field.wav")], show_progress=False)
    coarse_spans = np.array(coarse_index.spans)
    np.testing.assert_allclose(coarse_spans[:, 0], np.arange(300) * 0.2, atol=1e-9)
    coarse_scores = (torch.from_numpy(coarse_index.embeddings) @ text).numpy()[5:-5]
    overlaps = (coarse_spans[5:-5, 0] < EVENT_AT + EVENT_SECONDS) & (coarse_spans[5:-5, 1] > EVENT_AT)
    start, end = coarse_spans[5:-5][clear_best_among(coarse_scores, overlaps)]
    assert start < EVENT_AT + EVENT_SECONDS and end > EVENT_AT
    (hit,) = coarse(CAPTION, top_k=1)
    assert hit["end"] - hit["start"] == pytest.approx(0.2)

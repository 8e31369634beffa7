from __future__ import annotations

import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from hf_atr.tokenization import SPECIAL_TOKENS, train_caption_tokenizer

CAPTIONS = [
    "A dog barks loudly.",
    "Un chien aboie fort.",
    "狗在叫。",
    "犬が吠える。",
    "Ein Hund bellt, dann Stille.",
] * 3


def test_frequent_words_are_whole_tokens_and_rare_words_fall_back_to_characters():
    tokenizer = train_caption_tokenizer(CAPTIONS, vocab_size=200)
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("a dog barks, hund bellt 狗")["input_ids"])
    assert tokens == ["[CLS]", "a", "dog", "barks", ",", "hund", "bellt", "狗", "[SEP]"]
    assert tokenizer.convert_ids_to_tokens(tokenizer("dogs")["input_ids"])[1:-1] == ["dog", "##s"]


def test_small_budget_keeps_specials_and_characters():
    tokenizer = train_caption_tokenizer(CAPTIONS, vocab_size=10)
    vocab = tokenizer.get_vocab()
    assert [vocab[token] for token in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert "[UNK]" not in tokenizer.convert_ids_to_tokens(tokenizer("dog")["input_ids"])


@pytest.mark.slow
def test_ids_are_identical_across_processes():
    script = (
        "from hf_atr.tokenization import train_caption_tokenizer;"
        f"print(sorted(train_caption_tokenizer({CAPTIONS!r}, vocab_size=60).get_vocab().items()))"
    )
    outputs = {
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    }
    assert len(outputs) == 1


def test_round_trip_through_autotokenizer(tmp_path):
    tokenizer = train_caption_tokenizer(CAPTIONS)
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("ein hund bellt")["input_ids"] == tokenizer("ein hund bellt")["input_ids"]


def test_vocab_size_below_the_special_tokens_is_rejected():
    with pytest.raises(ValueError, match="vocab_size must exceed the 5 special tokens, got 3"):
        train_caption_tokenizer(CAPTIONS, vocab_size=3)

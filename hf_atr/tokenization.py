"""A small WordPiece caption tokenizer built with the `tokenizers` library (for from-scratch text backbones)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def train_caption_tokenizer(
    captions: Iterable[str], *, vocab_size: int = 4000, model_max_length: int = 64
) -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece tokenizer built from ``captions``, deterministically.

    Lower-cases, keeps accents, and splits CJK characters into single tokens (``BertNormalizer``), so
    one vocabulary serves English, the Romance/Germanic languages, Japanese and Chinese. The vocabulary
    is the most frequent words (ties broken alphabetically) plus every character seen, as a word start
    and as a ``##`` continuation, so rarer words fall back to characters instead of ``[UNK]``. It is
    built by counting rather than by the ``tokenizers`` WordPiece trainer, whose merges break ties in
    hash order and differ between processes (every rank of a distributed run needs the same ids).
    The result saves and loads with ``save_pretrained`` / ``AutoTokenizer.from_pretrained``.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(
            f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}."
        )
    normalizer = normalizers.BertNormalizer(lowercase=True, handle_chinese_chars=True, strip_accents=False)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    word_counts: Counter[str] = Counter()
    for caption in captions:
        word_counts.update(
            word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(caption))
        )
    characters = sorted({character for word in word_counts for character in word})
    character_tokens = [*characters, *(f"##{character}" for character in characters)]
    word_budget = max(vocab_size - len(SPECIAL_TOKENS) - len(character_tokens), 0)
    frequent_words = [
        word for word, _ in sorted(word_counts.items(), key=lambda item: (-item[1], item[0])) if len(word) > 1
    ][:word_budget]
    tokens = list(dict.fromkeys((*SPECIAL_TOKENS, *character_tokens, *sorted(frequent_words))))
    tokenizer = Tokenizer(
        models.WordPiece(vocab={token: index for index, token in enumerate(tokens)}, unk_token="[UNK]")
    )
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    cls_id, sep_id = tokens.index("[CLS]"), tokens.index("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tokenizer.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=model_max_length,
    )

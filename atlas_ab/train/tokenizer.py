"""Byte-level BPE (4,096 tokens) trained on the corpus's train split.

    python -m atlas_ab.train.tokenizer --out atlas_ab/models/default/tokenizer.json

The shipped tokenizer.json is the artifact; retraining it changes every token id,
so only do it together with retraining the models.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from atlas_ab.workload.corpus import build_corpus, file_sha256

VOCAB_SIZE = 4096
EOS = "<|endoftext|>"
SPECIAL_TOKENS = [EOS]


def train_tokenizer(vocab_size: int = VOCAB_SIZE):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [d.text for d in build_corpus().select(split="train")]
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def load_tokenizer(path):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(path))


def encode_texts(tok, texts: list[str]) -> list[list[int]]:
    """Token ids of each text (no special tokens added)."""
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="path of the tokenizer.json to write")
    ap.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    a = ap.parse_args(argv)
    t0 = time.time()
    tok = train_tokenizer(a.vocab_size)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    tok.save(a.out)
    print(f"tokenizer: vocab {tok.get_vocab_size()} -> {a.out} {file_sha256(a.out)} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()

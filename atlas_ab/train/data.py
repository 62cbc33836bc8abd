"""Token arrays for training: the corpus's splits, tokenized, one EOS between documents.

    python -m atlas_ab.train.data --tokenizer atlas_ab/models/default/tokenizer.json --out .carry/data

writes train.npy / heldout.npy (uint16) and meta.json (corpus info, tokenizer hash).
Build them HERE and carry them to the GPU machine: its Python (another version)
has another stdlib, so building there would train on another corpus.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from atlas_ab import AtlasError
from atlas_ab.workload.corpus import build_corpus, file_sha256


def tokenize_split(tok, split: str, sources=None) -> np.ndarray:
    docs = [d for d in build_corpus().select(split=split) if sources is None or d.source in sources]
    eos = tok.token_to_id("<|endoftext|>")
    out = []
    for e in tok.encode_batch([d.text for d in docs], add_special_tokens=False):
        out.append(np.asarray(e.ids, dtype=np.uint16))
        out.append(np.asarray([eos], dtype=np.uint16))
    return np.concatenate(out) if out else np.zeros(0, np.uint16)


def prepare(tokenizer_path, out_dir) -> dict:
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tokenizer_path))
    if tok.get_vocab_size() > 65535:
        raise AtlasError("vocab too large for uint16 token arrays")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"corpus": build_corpus().info.to_dict(), "tokenizer_hash": file_sha256(tokenizer_path)}
    for split in ("train", "heldout"):
        arr = tokenize_split(tok, split)
        np.save(out / f"{split}.npy", arr)
        meta[f"{split}_tokens"] = int(arr.size)
    # held-out stdlib source alone, for the teacher-forced acceptance check
    arr = tokenize_split(tok, "heldout", sources=("stdlib",))
    np.save(out / "heldout_stdlib.npy", arr)
    meta["heldout_stdlib_tokens"] = int(arr.size)
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def load(data_dir) -> tuple[dict, dict]:
    d = Path(data_dir)
    if not (d / "meta.json").is_file():
        raise AtlasError(f"no token arrays in {str(d)!r} (run python -m atlas_ab.train.data)")
    meta = json.loads((d / "meta.json").read_text())
    arrs = {s: np.load(d / f"{s}.npy") for s in ("train", "heldout", "heldout_stdlib")}
    return meta, arrs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="tokenize the corpus splits into uint16 arrays")
    ap.add_argument("--tokenizer", default="atlas_ab/models/default/tokenizer.json")
    ap.add_argument("--out", default=".carry/data")
    a = ap.parse_args(argv)
    print(json.dumps(prepare(a.tokenizer, a.out)))


if __name__ == "__main__":
    main()

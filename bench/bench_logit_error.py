"""Calibration of the lossless gate's bf16 bound: how far a whole forward in a low-precision dtype
moves the logits from fp32 (same weights), against the logits' magnitude.

    python bench/bench_logit_error.py [--dtype bfloat16] [--tokens 256] [--device cpu]

Models: the shipped default (trained, 7.3M, 6 layers), random d256 Llama trunks of 2 / 8 / 24
layers, and (with --big, meant for the GPU) the llama1b / llama8b preset shapes. Each on held-out
stdlib text. Prints, per model, |logit_dtype - logit_fp32| / (u * m) (u = the dtype's unit
roundoff, m = the position's largest |fp32 logit|) at the median / 99th / 99.9th percentile and
max, and the raw error binned by each logit's own |value|. precision.FORWARD_ERROR (the ceiling) is set from it.
"""
from __future__ import annotations

import argparse
import json

import torch

from atlas_ab.config.paths import PACKAGE_DIR
from atlas_ab.speculative.precision import forward_error


def held_out_tokens(n_seq: int, n_tok: int) -> torch.Tensor:
    from tokenizers import Tokenizer

    from atlas_ab.workload.corpus import build_corpus
    tok = Tokenizer.from_file(str(PACKAGE_DIR / "models" / "default" / "tokenizer.json"))
    docs = [d for d in build_corpus().select("stdlib", "heldout") if len(d.text) > 8 * n_tok]
    return torch.tensor([tok.encode(d.text).ids[:n_tok] for d in docs[:n_seq]])


def random_trunk(device, dtype, **shape):
    from types import SimpleNamespace

    from atlas_ab.runtime.presets import random_checkpoint
    return random_checkpoint(SimpleNamespace(vocab_size=4096, **shape), "", device, dtype).trunk


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--big", action="store_true", help="also the llama1b / llama8b preset shapes (GPU)")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    toks = held_out_tokens(a.seqs, a.tokens)
    from atlas_ab.runtime import checkpoint
    models = {"default (trained, 7.3M, 6 layers)":
              lambda: checkpoint.load(PACKAGE_DIR / "models" / "default", a.device, torch.float32).trunk}
    for L in (2, 8, 24):
        models[f"random d256 x {L} layers"] = lambda L=L: random_trunk(
            a.device, torch.float32, hidden_size=256, num_hidden_layers=L, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=688)
    if a.big:
        models["llama1b shape (random)"] = lambda: random_trunk(
            a.device, dtype, hidden_size=2048, num_hidden_layers=16, num_attention_heads=16,
            num_key_value_heads=8, intermediate_size=5632)
        models["llama8b shape (random)"] = lambda: random_trunk(
            a.device, dtype, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
            num_key_value_heads=8, intermediate_size=11008)
    for name, build in models.items():
        torch.manual_seed(0)
        r = forward_error(build(), toks, dtype)
        q = r["ratio"]
        print(f"{name}: {r['n_logits']:,} logits, median position magnitude m {r['median_position_magnitude']:.2f}; "
              f"|err| / (u m): median {q['q50']:.2f}, q99 {q['q99']:.2f}, q99.9 {q['q99.9']:.2f}, max {q['max']:.2f}")
        for b in r["bins"]:
            print(f"    |logit| in [{b['abs_logit'][0]}, {b['abs_logit'][1]}): n {b['n']:>9,}  "
                  f"|err| median {b['err_median']:.4f}  max {b['err_max']:.4f}")
        print("    " + json.dumps(r))


if __name__ == "__main__":
    main()

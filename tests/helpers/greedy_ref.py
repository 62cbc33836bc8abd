"""The shipped default model's own greedy decoding, recomputed from scratch (no KV cache), on three
held-out prompts of ragged lengths: the reference a drafter family's committed tokens must equal
(tests/speculative/test_tree_step.py, test_eagle3_default.py)."""
from __future__ import annotations

from pathlib import Path

import torch

DEFAULT = Path(__file__).resolve().parents[2] / "atlas_ab" / "models" / "default"


def heldout_prompts() -> list[list[int]]:
    """Three prompts of 48, 31 and 60 tokens from one long held-out stdlib document."""
    from tokenizers import Tokenizer

    from atlas_ab.workload.corpus import build_corpus
    tok = Tokenizer.from_file(str(DEFAULT / "tokenizer.json"))
    held = [d for d in build_corpus().select("stdlib", "heldout") if len(d.text) > 4000]
    ids = tok.encode(held[0].text, add_special_tokens=False).ids
    return [ids[:48], ids[300:331], ids[900:960]]          # ragged lengths


def greedy_without_cache(trunk, prompts, n_new: int) -> list[list[int]]:
    """The target alone: argmax after each prefix, recomputed from scratch (no cache)."""
    out = []
    with torch.no_grad():
        for p in prompts:
            seq = list(p)
            for _ in range(n_new):
                z = trunk.logits(trunk.forward_train(torch.tensor([seq]))[:, -1:])
                seq.append(int(z[0, 0].argmax()))
            out.append(seq[len(p):])
    return out


def transformers_greedy(ck, prompts, n_new: int) -> list[list[int]]:
    """transformers' own greedy decoding of each prompt (fp32, no EOS stop): the outside reference."""
    import transformers

    from atlas_ab.runtime import checkpoint

    class Quiet(transformers.LlamaForCausalLM):
        _keys_to_ignore_on_load_unexpected = checkpoint.hf_unexpected_patterns(ck.args)

    hf = Quiet.from_pretrained(DEFAULT, dtype=torch.float32).eval()
    theirs = []
    with torch.no_grad():
        for p in prompts:
            g = hf.generate(torch.tensor([p]), max_new_tokens=n_new, do_sample=False, num_beams=1,
                            pad_token_id=0, eos_token_id=None)
            theirs.append(g[0, len(p):].tolist())
    return theirs

"""A randomly initialised model of a given shape (the GPU preset for throughput work).

Acceptance on random weights means nothing; speed does not care. The tokenizer
is the embedded default's, so workloads are the same token streams.
"""
from __future__ import annotations

import torch

from atlas_ab import AtlasError
from atlas_ab.runtime.checkpoint import Checkpoint
from atlas_ab.runtime.config import ModelArgs
from atlas_ab.runtime.model import MTPModule, Transformer, init_weights


def random_checkpoint(cfg, tokenizer_path, device, dtype, seed: int = 0) -> Checkpoint:
    if cfg.hidden_size % cfg.num_attention_heads:
        raise AtlasError(f"model.hidden_size={cfg.hidden_size} is not a multiple of "
                         f"num_attention_heads={cfg.num_attention_heads}")
    args = ModelArgs(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                     intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
                     num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
                     head_dim=cfg.hidden_size // cfg.num_attention_heads, num_nextn_predict_layers=1)
    torch.manual_seed(seed)
    with torch.device(device):
        trunk, mtp = Transformer(args), MTPModule(args)
    init_weights(trunk)
    init_weights(mtp)
    trunk, mtp = trunk.to(dtype), mtp.to(dtype).attach(trunk)
    shape = "x".join(str(v) for v in (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                                      cfg.num_key_value_heads, cfg.intermediate_size, cfg.vocab_size))
    return Checkpoint(args, trunk, mtp, str(tokenizer_path), f"random:{shape}:seed{seed}")

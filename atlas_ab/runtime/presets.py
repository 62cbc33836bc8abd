"""A randomly initialised model of a given shape (model=gpu / llama1b / llama8b: speed work).

Acceptance on random weights means nothing; speed does not care. The tokenizer
is the embedded default's, so workloads are the same token streams.

The weights are made where they will live, in the run's dtype: the modules are
built on the meta device, given uninitialised storage on `device` in `dtype`
(`_on_device`), then filled by `init_weights`. Nothing is materialised on the
CPU and nothing in fp32 first, so a 5.7B-parameter trunk costs its bf16 bytes
(11.4 GB) on the GPU and a few fills, not a 23 GB fp32 copy and a cast.
"""
from __future__ import annotations

import dataclasses

import torch

from atlas_ab import AtlasError
from atlas_ab.runtime import layouts
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.checkpoint import Checkpoint
from atlas_ab.runtime.model import MTPModule, Transformer, init_weights

#: The random MTP is wired as atlas_ab's trainer wires it (DeepSeek-V3 names, pre-norm handoff).
RANDOM_LAYOUT = dataclasses.replace(layouts.TRAINED_HERE, source="init=random (wired as atlas_ab trains)")


def args_of(cfg) -> ModelArgs:
    if cfg.hidden_size % cfg.num_attention_heads:
        raise AtlasError(f"model.hidden_size={cfg.hidden_size} is not a multiple of "
                         f"num_attention_heads={cfg.num_attention_heads}")
    return ModelArgs(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                     intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
                     num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
                     head_dim=cfg.hidden_size // cfg.num_attention_heads, num_nextn_predict_layers=1)


def _on_device(module: torch.nn.Module, device, dtype) -> torch.nn.Module:
    """A meta-built module given storage on `device` in `dtype`, then initialised there.

    Each parameter is replaced by a `torch.empty` of its shape rather than by `Module.to_empty`:
    that runs `empty_like` on meta tensors through torch's Python reference path, which imports
    sympy, most of the Runner's build (bench/results/startup_warm_h200_2026-12-01b_profile.txt)."""
    def empty(t):
        return torch.empty(t.shape, device=device, dtype=dtype if t.is_floating_point() else t.dtype)
    made = {}
    for m in module.modules():
        for name, p in list(m._parameters.items()):
            if p is not None:
                if id(p) not in made:       # a parameter shared by two modules stays shared
                    made[id(p)] = torch.nn.Parameter(empty(p), requires_grad=p.requires_grad)
                m._parameters[name] = made[id(p)]
        for name, b in list(m._buffers.items()):
            if b is not None:
                m._buffers[name] = empty(b)
    init_weights(module)
    return module


def random_checkpoint(cfg, tokenizer_path, device, dtype, seed: int = 0) -> Checkpoint:
    args = args_of(cfg)
    torch.manual_seed(seed)
    with torch.device("meta"):
        trunk, mtp = Transformer(args), MTPModule(args)
    trunk = _on_device(trunk, device, dtype)
    trunk.tie_weights()
    mtp = _on_device(mtp, device, dtype).attach(trunk)
    shape = "x".join(str(v) for v in (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                                      cfg.num_key_value_heads, cfg.intermediate_size, cfg.vocab_size))
    return Checkpoint(args, trunk.eval(), mtp.eval(), str(tokenizer_path), f"random:{shape}:seed{seed}",
                      layout=RANDOM_LAYOUT)

"""Independent references for the MTP layouts, in plain torch from the definitions.

Nothing here imports atlas_ab: the trunk (Llama / Qwen2 decoder, HF conventions), the two MTP
layers as their sources define them, and our drafter's row protocol, all over a dict of the
checkpoint's tensors by their checkpoint names. Tiny checkpoints are written from the same
dicts (safetensors + config.json), so a test compares what our loader and drafter make of the
files with what the definition says.

  DeepSeek-V3 MTP  x = eh_proj(cat([enorm(embed), hnorm(hidden)])); logits = head(shared_head.norm(out))
  MiMo MTP         x = input_proj(cat([hidden_layernorm(hidden), token_layernorm(embed)])),
                   embedding zeroed at the first position; logits = lm_head(final_layernorm(out))
  either           out = one pre-norm decoder layer over x (causal, RoPE)

The drafter's rows (proposers/rowspace.py, compact space): row k pairs the token at position
k+1 with the hidden of position k, at RoPE position k+1. Draft 1 reads the target's hidden of
the last committed position; draft i+1 reads draft i's recycled output.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta):
    """x [T, heads, D]; HF rotate_half convention."""
    D = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    f = pos[:, None].double() * inv
    cos, sin = torch.cat([f, f], -1).cos().float()[:, None], torch.cat([f, f], -1).sin().float()[:, None]
    return x * cos + torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1) * sin


def layer(t, p, x, pos, cfg):
    """One pre-norm decoder layer under prefix p over T rows, causal."""
    H, nh, kvh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D, eps, T = H // nh, cfg["rms_norm_eps"], x.shape[0]

    def lin(name, v):
        return v @ t[p + name + ".weight"].T + t.get(p + name + ".bias", 0)

    h = rms(x, t[p + "input_layernorm.weight"], eps)
    q = rope(lin("self_attn.q_proj", h).view(T, nh, D), pos, cfg["rope_theta"])
    k = rope(lin("self_attn.k_proj", h).view(T, kvh, D), pos, cfg["rope_theta"]).repeat_interleave(nh // kvh, 1)
    v = lin("self_attn.v_proj", h).view(T, kvh, D).repeat_interleave(nh // kvh, 1)
    s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(D)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    x = x + lin("self_attn.o_proj", torch.einsum("hts,shd->thd", s.softmax(-1), v).reshape(T, nh * D))
    h = rms(x, t[p + "post_attention_layernorm.weight"], eps)
    return x + lin("mlp.down_proj", F.silu(lin("mlp.gate_proj", h)) * lin("mlp.up_proj", h))


def trunk_hidden(t, cfg, tokens):
    """The last layer's residual stream (PRE final norm) [T, H] of one sequence."""
    x = t["model.embed_tokens.weight"][torch.as_tensor(tokens)]
    pos = torch.arange(len(tokens))
    for i in range(cfg["num_hidden_layers"]):
        x = layer(t, f"model.layers.{i}.", x, pos, cfg)
    return x


def lm_head(t):
    return t.get("lm_head.weight", t["model.embed_tokens.weight"])


def final_norm(t, cfg, h):
    return rms(h, t["model.norm.weight"], cfg["rms_norm_eps"])


@dataclass
class RefLayout:
    """One MTP layer as its definition states it (names are the checkpoint's)."""
    prefix: str
    embed_norm: str
    hidden_norm: str
    proj: str
    out_norm: str
    hidden_first: bool
    zero_first: bool
    block: str = ""
    own_head: str = ""


# DeepSeek-V3 (vLLM deepseek_mtp.py)
DEEPSEEK = lambda N: RefLayout(f"model.layers.{N}.", "enorm", "hnorm", "eh_proj", "shared_head.norm",  # noqa: E731
                               hidden_first=False, zero_first=True, own_head="shared_head.head")
# MiMo (vLLM mimo_mtp.py)
MIMO = RefLayout("model.mtp_layers.0.", "token_layernorm", "hidden_layernorm", "input_proj", "final_layernorm",
                 hidden_first=True, zero_first=True)


def mtp_rows(t, cfg, lay: RefLayout, next_tokens, hiddens, rope_pos, first_key: int):
    """The MTP layer over rows (token, hidden) at RoPE positions, causal -> out [R, H] pre its
    final norm. Row r has pair key first_key + r; the key-0 row's embedding is zeroed if the
    definition says so."""
    p, eps = lay.prefix, cfg["rms_norm_eps"]
    e = t["model.embed_tokens.weight"][torch.as_tensor(next_tokens)].clone()
    if lay.zero_first and first_key == 0:
        e[0] = 0
    e = rms(e, t[p + lay.embed_norm + ".weight"], eps)
    h = rms(hiddens, t[p + lay.hidden_norm + ".weight"], eps)
    x = torch.cat([h, e] if lay.hidden_first else [e, h], -1) @ t[p + lay.proj + ".weight"].T
    return layer(t, p + lay.block, x, rope_pos, cfg)


def mtp_logits(t, cfg, lay: RefLayout, out):
    head = t.get(lay.prefix + lay.own_head + ".weight") if lay.own_head else None
    return rms(out, t[lay.prefix + lay.out_norm + ".weight"], cfg["rms_norm_eps"]) @ \
        (head if head is not None else lm_head(t)).T


@torch.no_grad()
def reference_drafts(t, cfg, lay: RefLayout, tokens, K: int, handoff: str, recycle: str):
    """Our drafter after context rows over a prompt and one propose of K (compact row space),
    by the definition: returns (drafts [K], top-1 probs [K])."""
    h = trunk_hidden(t, cfg, tokens)
    T = len(tokens)
    seq = list(tokens) + [int((final_norm(t, cfg, h[-1]) @ lm_head(t).T).argmax())]
    handed = final_norm(t, cfg, h) if handoff == "post" else h
    rows = [handed[k] for k in range(T)]
    drafts, confs = [], []
    for _ in range(K):
        R = len(rows)
        out = mtp_rows(t, cfg, lay, seq[1:R + 1], torch.stack(rows), torch.arange(R) + 1, 0)[-1]
        prob = mtp_logits(t, cfg, lay, out).softmax(-1)
        drafts.append(int(prob.argmax()))
        confs.append(float(prob.max()))
        seq.append(drafts[-1])
        rows.append(rms(out, t[lay.prefix + lay.out_norm + ".weight"], cfg["rms_norm_eps"])
                    if recycle == "post" else out)
    return drafts, confs


# ---- tiny checkpoints, written from a tensor dict ------------------------------------------------
def llama_tensors(cfg, seed, qkv_bias=False, norm_spread=0.0):
    """A random Llama/Qwen2 trunk's tensors. norm_spread > 0 draws every RMSNorm weight from
    [1 - spread, 1 + spread] (far from uniform: then pre vs post norm matters)."""
    g = torch.Generator().manual_seed(seed)
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kvd = cfg["num_key_value_heads"] * H // cfg["num_attention_heads"]

    def w(*shape, std=0.2):
        return torch.randn(*shape, generator=g) * std

    def norm():
        return 1 + norm_spread * (2 * torch.rand(H, generator=g) - 1) if norm_spread else 1 + 0.05 * w(H)

    t = {"model.embed_tokens.weight": w(V, H, std=1.0), "model.norm.weight": norm(), "lm_head.weight": w(V, H)}
    for i in range(cfg["num_hidden_layers"]):
        t.update(block_tensors(f"model.layers.{i}.", H, I, kvd, w, norm, qkv_bias))
    return t, w, norm


def block_tensors(p, H, I, kvd, w, norm, qkv_bias):
    t = {p + "self_attn.q_proj.weight": w(H, H), p + "self_attn.k_proj.weight": w(kvd, H),
         p + "self_attn.v_proj.weight": w(kvd, H), p + "self_attn.o_proj.weight": w(H, H),
         p + "mlp.gate_proj.weight": w(I, H), p + "mlp.up_proj.weight": w(I, H), p + "mlp.down_proj.weight": w(H, I),
         p + "input_layernorm.weight": norm(), p + "post_attention_layernorm.weight": norm()}
    if qkv_bias:
        t.update({p + "self_attn.q_proj.bias": w(H), p + "self_attn.k_proj.bias": w(kvd),
                  p + "self_attn.v_proj.bias": w(kvd)})
    return t


def mtp_tensors(lay: RefLayout, cfg, w, norm, qkv_bias, own_head=False):
    H, I = cfg["hidden_size"], cfg["intermediate_size"]
    kvd = cfg["num_key_value_heads"] * H // cfg["num_attention_heads"]
    p = lay.prefix
    t = {p + lay.embed_norm + ".weight": norm(), p + lay.hidden_norm + ".weight": norm(),
         p + lay.proj + ".weight": w(H, 2 * H), p + lay.out_norm + ".weight": norm()}
    t.update(block_tensors(p + lay.block, H, I, kvd, w, norm, qkv_bias))
    if own_head:
        t[p + lay.own_head + ".weight"] = w(cfg["vocab_size"], H)
    return t


def write_checkpoint(d: Path, cfg: dict, tensors: dict) -> Path:
    from safetensors.torch import save_file
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "model.safetensors"))
    return d


def base_config(model_type="llama", hidden=32, layers=2, heads=4, kv_heads=2, **extra):
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mimo": "MiMoForCausalLM"}[model_type]
    return {"architectures": [arch], "model_type": model_type, "vocab_size": 61, "hidden_size": hidden,
            "intermediate_size": 2 * hidden + 8, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 5000.0,
            "max_position_embeddings": 512, "tie_word_embeddings": False, "num_nextn_predict_layers": 1, **extra}


def mimo_checkpoint(d: Path, seed=0, norm_spread=0.0, drafts_well=False, **cfg_extra) -> tuple[dict, dict]:
    """A tiny MiMo-7B-style checkpoint: Qwen2 trunk with q/k/v biases + model.mtp_layers.0.
    drafts_well: a one-layer trunk whose MTP layer is a noisy copy of it fed the token embedding
    (input_proj passes the embedding half through), so drafts get accepted and every lever has
    rows to act on."""
    cfg = {**base_config("mimo", attention_bias=True, use_sliding_window=False), **cfg_extra}
    if drafts_well:
        cfg["num_hidden_layers"] = 1
    t, w, norm = llama_tensors(cfg, seed, qkv_bias=True, norm_spread=norm_spread)
    t.update(mtp_tensors(MIMO, cfg, w, norm, qkv_bias=True))
    if drafts_well:
        H, p = cfg["hidden_size"], MIMO.prefix
        e = t["model.embed_tokens.weight"]
        t["model.embed_tokens.weight"] = e / e.pow(2).mean(-1, keepdim=True).sqrt()
        for k in [k for k in t if k.startswith("model.layers.0.")]:
            t[p + k[len("model.layers.0."):]] = t[k] * (1 + 0.05 * w(*t[k].shape, std=1.0))
        t[p + "input_proj.weight"] = torch.cat([0.05 * w(H, H, std=1.0), torch.eye(H)], 1)
        t[p + "token_layernorm.weight"] = torch.ones(H)
        t[p + "final_layernorm.weight"] = t["model.norm.weight"].clone()
    write_checkpoint(d, cfg, t)
    return cfg, t


def deepseek_checkpoint(d: Path, seed=0, norm_spread=0.0, own_head=True, embed_copy=True, **cfg_extra):
    """A tiny dense DeepSeek-V3-style checkpoint: Llama trunk + model.layers.{N} MTP (own head, and
    the MTP's copy of the embedding as DeepSeek-V3 stores it)."""
    cfg = {**base_config("llama"), **cfg_extra}
    t, w, norm = llama_tensors(cfg, seed, norm_spread=norm_spread)
    lay = DEEPSEEK(cfg["num_hidden_layers"])
    t.update(mtp_tensors(lay, cfg, w, norm, qkv_bias=False, own_head=own_head))
    if embed_copy:
        t[lay.prefix + "embed_tokens.weight"] = t["model.embed_tokens.weight"].clone()
    write_checkpoint(d, cfg, t)
    return cfg, t

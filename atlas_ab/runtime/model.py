"""A compact Llama-family decoder (Llama / Mistral / Qwen2 / Qwen3) and a DeepSeek-V3-style MTP module.

Parameter names are Hugging Face's (model.embed_tokens, model.layers.{i}.self_attn.q_proj, ...,
model.norm, lm_head), so a HF state dict loads as it is. Numerics follow transformers: RMSNorm in
fp32 then cast, RoPE cos/sin computed in fp32 from per-row positions (rotate_half convention) and
cast to the activation dtype, SDPA with scale head_dim**-0.5.

Two ways to run:
  forward(tokens, positions, slots, kv, length=None)  cached, batched and ragged (see kv.py)
  forward_train(tokens)                              no cache, plain causal attention, autograd-ready
Both return the last block's residual stream PRE final norm; logits() applies norm + head and
returns float32.

Host syncs: the torch path needs L = max slot + 1 on the host to size the KV read. Pass `length`
(the caller built `slots`, so it knows); if omitted it is computed with one .item() (free on CPU,
a sync on GPU). The Triton path (kernels/, the default on CUDA) ignores `length`: each row reads
its own sequence's live slots, found on the device.

Two implementations of the cached forward, chosen per call by kernels.enabled(): the torch path
below (the reference; the CPU's) and the fast path (`_layers_fast`: fused qkv / gate_up matmuls
over the same parameters, Triton attention / RoPE + KV write / norms / SiLU).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from atlas_ab import AtlasError
from atlas_ab.runtime import kernels
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.kernels.attention import ancestor_bits, attention as attention_kernel
from atlas_ab.runtime.kernels.matmul import linear
from atlas_ab.runtime.kernels.mlp import silu_mul
from atlas_ab.runtime.kernels.norm import add_rmsnorm, rmsnorm
from atlas_ab.runtime.kernels.rope import rope_write_kv
from atlas_ab.runtime.kv import KVPool


# ---- building blocks ----------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # HF: normalise in fp32, cast back to the input dtype, then scale.
        return self.weight * F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)

    def fast(self, x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """forward(x) as one Triton kernel (the fast path), optionally into `out`."""
        return rmsnorm(x, self.weight, self.eps, out=out)


_INV_FREQ: dict = {}


def inv_freq(head_dim: int, theta: float, device) -> torch.Tensor:
    """[head_dim / 2] fp32 RoPE frequencies (HF default), cached per device."""
    key = (head_dim, float(theta), device)
    inv = _INV_FREQ.get(key)
    if inv is None:
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        inv = _INV_FREQ[key] = inv.to(device)
    return inv


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """positions [B, T] (int) -> cos, sin [B, T, 1, head_dim] in `dtype` (HF default RoPE)."""
    inv = inv_freq(head_dim, theta, positions.device)
    f = positions[..., None].float() * inv                     # [B, T, D/2], fp32
    emb = torch.cat((f, f), dim=-1)[:, :, None, :]
    return emb.cos().to(dtype), emb.sin().to(dtype)


ROPE_TABLE_POSITIONS = 1 << 15     # 8 MiB of bf16 tables at head_dim 128; later positions: computed


def rope_table(head_dim: int, theta: float, dtype: torch.dtype, device) -> tuple:
    """(cos [n, D/2], sin [n, D/2], inv_freq) for positions 0..n-1, computed once per device and
    dtype by rope_cos_sin itself, so the Triton RoPE reads exactly the torch path's values."""
    key = ("table", head_dim, float(theta), dtype, device)
    t = _INV_FREQ.get(key)
    if t is None:
        pos = torch.arange(ROPE_TABLE_POSITIONS, device=device)[None]
        cos, sin = rope_cos_sin(pos, head_dim, theta, dtype)
        half = head_dim // 2
        t = _INV_FREQ[key] = (cos[0, :, 0, :half].contiguous(), sin[0, :, 0, :half].contiguous(),
                              inv_freq(head_dim, theta, device))
    return t


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, heads, D]; rotate_half convention (first half / second half)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class _Ctx:
    """Per-forward attention context shared by all layers (computed once). `fast`: the Triton
    path, which needs only the pool and the slots (no mask, no length, no flat indices)."""
    __slots__ = ("kv", "flat", "length", "mask", "causal", "fold", "fast", "slots", "window", "tree")

    def __init__(self, kv=None, flat=None, length=0, mask=None, causal=False, fold=False, fast=False,
                 slots=None, window=None, tree=None):
        self.kv, self.flat, self.length, self.mask, self.causal, self.fold = kv, flat, length, mask, causal, fold
        self.fast, self.slots, self.window = fast, slots, window
        self.tree = tree        # the Triton path's tree (start [B], ancestor bits [T] int32), or None


FOLD_MAX_ROWS = 64      # fold GQA groups into the query rows when G*T is at most this


def _cached_ctx(kv: KVPool, slots: torch.Tensor, length: Optional[int], a: ModelArgs, dtype, tree=None) -> _Ctx:
    if tree is not None and a.sliding_window is not None:
        raise AtlasError("a tree verify on a sliding-window model: the window would be by slot, not position")
    if kv.dtype == dtype and kernels.enabled(kv.device):
        slots = slots.to(kv.device, non_blocking=True).contiguous()
        # a tree: its block's start and each row's ancestors as a bitmask, built once per forward
        fast_tree = None if tree is None else (tree[0].to(kv.device).contiguous(), ancestor_bits(tree[1]))
        return _Ctx(kv=kv, fast=True, slots=slots, window=a.sliding_window, tree=fast_tree)
    if length is None:
        length = int(slots.max()) + 1        # one host sync on GPU: pass `length` to avoid it
    length = max(int(length), 1)
    slots = slots.to(kv.device, non_blocking=True)       # no-op when already there
    B, T = slots.shape
    G = a.num_attention_heads // a.num_key_value_heads
    if tree is None:
        m = kv.mask(slots, length, a.sliding_window)                    # [B, 1, T, L] bool
    else:
        m = kv.tree_mask(slots, length, *tree)                          # [B, 1, T, L] bool
    # Few rows (decode / verify / drafts): queries are folded to [B, KVH, G*T, D], so grouped heads
    # share K/V with no copy and no enable_gqa (which forces the math kernel when a mask is given
    # on GPU); the mask is repeated G times. Many rows (prefill): K/V are repeated to all heads
    # instead, so the mask stays [B, 1, T, L]. Either way the mask is built once per forward,
    # additive in the activation dtype (SDPA would convert a bool mask in every layer).
    fold = G > 1 and G * T <= FOLD_MAX_ROWS
    if fold:
        m = m.expand(B, G, T, length).reshape(B, 1, G * T, length)
    add = torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill_(~m, float("-inf"))
    return _Ctx(kv=kv, flat=kv.flat(slots), length=length, mask=add, fold=fold)


def cached_ctx(kv: KVPool, slots: torch.Tensor, length: Optional[int], a: ModelArgs, dtype, tree=None) -> _Ctx:
    """The attention context of a cached forward (one per forward, shared by its layers): for a
    drafter module outside this file (runtime/eagle3.py)."""
    return _cached_ctx(kv, slots, length, a, dtype, tree)


def train_ctx(T: int, device, window: Optional[int]) -> _Ctx:
    """The attention context of an uncached, causal forward over T rows (training)."""
    return _train_ctx(T, device, window)


def _train_ctx(T: int, device, window: Optional[int]) -> _Ctx:
    if window is None or window >= T:
        return _Ctx(causal=True)
    i = torch.arange(T, device=device)
    m = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
    return _Ctx(mask=m)


class Attention(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = a.num_attention_heads, a.num_key_value_heads, a.head_dim
        H = a.hidden_size
        self.q_proj = nn.Linear(H, self.n_heads * self.head_dim, bias=a.attention_bias)
        self.k_proj = nn.Linear(H, self.n_kv_heads * self.head_dim, bias=a.attention_bias)
        self.v_proj = nn.Linear(H, self.n_kv_heads * self.head_dim, bias=a.attention_bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, H, bias=a.o_bias)
        if a.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, a.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, a.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def kv_rows(self, x, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows' K (normed when qk_norm, rotated) and V [B, T, KVH, D]: a function of x alone.
        `forward` computes its K and V with this very call, so a KV-only writer's rows are its rows."""
        B, T, _ = x.shape
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        if self.k_norm is not None:
            k = self.k_norm(k)
        return apply_rope(k, cos, sin), v

    def forward(self, x, cos, sin, ctx: _Ctx, layer: int):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)
        k, v = self.kv_rows(x, cos, sin)
        if self.q_norm is not None:
            q = self.q_norm(q)
        q = apply_rope(q, cos, sin)
        if ctx.kv is None:      # training / uncached: causal (or windowed) over the T rows
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               attn_mask=ctx.mask, is_causal=ctx.causal, enable_gqa=True)
            return self.o_proj(o.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))
        ctx.kv.write(layer, None, k, v, flat=ctx.flat)
        k, v = ctx.kv.read(layer, ctx.length)                            # [B, L, KVH, D]
        KVH, G, D = self.n_kv_heads, self.n_heads // self.n_kv_heads, self.head_dim
        if not ctx.fold:
            if G > 1:
                k, v = k.repeat_interleave(G, dim=2), v.repeat_interleave(G, dim=2)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               attn_mask=ctx.mask)
            return self.o_proj(o.transpose(1, 2).reshape(B, T, self.n_heads * D))
        qf = q.view(B, T, KVH, G, D).permute(0, 2, 3, 1, 4).reshape(B, KVH, G * T, D)
        o = F.scaled_dot_product_attention(qf, k.transpose(1, 2), v.transpose(1, 2), attn_mask=ctx.mask)
        o = o.view(B, KVH, G, T, D).permute(0, 3, 1, 2, 4)                # [B, T, KVH, G, D]
        return self.o_proj(o.reshape(B, T, self.n_heads * D))

    def write_kv_fast(self, x, positions, rope, ctx: _Ctx, layer: int) -> torch.Tensor:
        """The Triton path's first half: one qkv matmul; RoPE (and q/k norm) on its output with the
        K/V rows written into the pool. Returns qkv (q rotated in place). The whole qkv matmul, not
        just its K/V columns: a KV-only writer then runs `forward_fast`'s kernels on its shapes."""
        qkv = linear(x, fused(self, "_qkv_w", (self.q_proj.weight, self.k_proj.weight, self.v_proj.weight)),
                     fused(self, "_qkv_b", (self.q_proj.bias, self.k_proj.bias, self.v_proj.bias)))
        kv = ctx.kv
        qn = (self.q_norm.weight, self.k_norm.weight, self.q_norm.eps) if self.q_norm is not None else (None, None, 0.0)
        rope_write_kv(qkv, positions, rope, kv.k[layer], kv.v[layer], ctx.slots, kv.base, kv.capacity, self.n_heads,
                      self.n_kv_heads, qn[0], qn[1], qn[2])
        return qkv

    def forward_fast(self, x, positions, rope, ctx: _Ctx, layer: int):
        """The Triton path: `write_kv_fast`; attention from the pool; o_proj."""
        qkv = self.write_kv_fast(x, positions, rope, ctx, layer)
        kv = ctx.kv
        k_pool, v_pool = kv.k[layer], kv.v[layer]
        o = attention_kernel(qkv, k_pool, v_pool, ctx.slots, kv.base, kv.capacity, self.n_heads,
                             self.head_dim ** -0.5, ctx.window, max_len=kv.max_capacity + 1, tree=ctx.tree)
        return linear(o, self.o_proj.weight, self.o_proj.bias)


class MLP(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.gate_proj = nn.Linear(a.hidden_size, a.intermediate_size, bias=False)
        self.up_proj = nn.Linear(a.hidden_size, a.intermediate_size, bias=False)
        self.down_proj = nn.Linear(a.intermediate_size, a.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def forward_fast(self, x):
        gate_up = linear(x, fused(self, "_gate_up_w", (self.gate_proj.weight, self.up_proj.weight)))
        return linear(silu_mul(gate_up), self.down_proj.weight)


class DecoderLayer(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.self_attn = Attention(a)
        self.mlp = MLP(a)
        self.input_layernorm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(a.hidden_size, a.rms_norm_eps)

    def forward(self, x, cos, sin, ctx: _Ctx, layer: int = 0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


def _layers_fast(layers, x, positions, args: ModelArgs, ctx: _Ctx, first_layer: int = 0, taps=None) -> torch.Tensor:
    """DecoderLayer.forward over `layers`, the Triton path: each residual add is fused into the
    norm that follows it (add_rmsnorm), and RoPE's cos/sin are read from a table by the RoPE
    kernel (rope_table: no per-forward tables), so a layer is norm, qkv, rope+write, attention,
    o_proj, add+norm, gate_up, silu*up, down. Returns the last residual stream (pre final norm).
    taps: (layer ids, list): the residual stream entering each listed layer is appended (`Taps`)."""
    positions = positions.to(x.device, non_blocking=True).contiguous()
    rope = rope_table(args.head_dim, args.rope_theta, x.dtype, x.device)
    h = layers[0].input_layernorm.fast(x)
    for i, layer in enumerate(layers):
        if taps is not None:
            taps.at(i, x)
        a = layer.self_attn.forward_fast(h, positions, rope, ctx, first_layer + i)
        n = layer.post_attention_layernorm
        x, h = add_rmsnorm(x, a, n.weight, n.eps)
        m = layer.mlp.forward_fast(h)
        if i + 1 < len(layers):
            n = layers[i + 1].input_layernorm
            x, h = add_rmsnorm(x, m, n.weight, n.eps)
        else:
            x = x + m
    if taps is not None:
        taps.at(len(layers), x)
    return x


class Taps:
    """The residual streams a forward passes at the given layer ids, in vLLM's aux-hidden-state
    numbering (`EagleModelMixin._maybe_add_hidden_state`): id i is the stream entering layer i (0: the
    embeddings), id num_hidden_layers the last layer's output, pre final norm."""

    def __init__(self, layers):
        self.layers, self.out = tuple(layers), {}

    def at(self, i: int, x: torch.Tensor) -> None:
        if i in self.layers:
            self.out[i] = x

    def features(self) -> torch.Tensor:
        """[..., len(layers) * H]: the streams concatenated in the ids' order (vLLM sorts them)."""
        return torch.cat([self.out[i] for i in self.layers], dim=-1)


def fused(owner: nn.Module, key: str, params) -> Optional[torch.Tensor]:
    """`params` (tensors of one module, or all None) stacked along dim 0 in one tensor, for one
    matmul instead of several. Each parameter's .data becomes a view into it: the Parameter
    objects stay (HF names, state_dict, optimizers and in-place updates all carry over) and the
    weights are stored once. Rebuilt when a parameter no longer lives there (replaced by a load
    with assign=True, moved by .to(), ...); the check is host-side pointer arithmetic."""
    ps = [p for p in params if p is not None]
    if not ps:
        return None
    f = owner.__dict__.get(key)
    if f is not None and _stacked_in(f, ps):
        return f
    with torch.no_grad():
        f = torch.cat([p.detach() for p in ps], 0)
        off = 0
        for p in ps:
            p.data = f[off:off + p.shape[0]]
            off += p.shape[0]
    owner.__dict__[key] = f
    return f


def _stacked_in(f: torch.Tensor, ps) -> bool:
    off, row = 0, f.stride(0) * f.element_size()
    for p in ps:
        if p.device != f.device or p.dtype != f.dtype or p.data_ptr() != f.data_ptr() + off * row:
            return False
        off += p.shape[0]
    return off == f.shape[0]


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """HF-style init: Linear/Embedding ~ N(0, std), biases 0, norms 1."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, RMSNorm):
            nn.init.ones_(m.weight)


# ---- the trunk ----------------------------------------------------------------------------------
class _Backbone(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        w = torch.empty(a.vocab_size, a.hidden_size)
        if not w.is_meta:      # (normal_ on a meta tensor imports torch._dynamo: seconds on first load)
            nn.init.normal_(w)
        self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size, _weight=w)
        self.layers = nn.ModuleList(DecoderLayer(a) for _ in range(a.num_hidden_layers))
        self.norm = RMSNorm(a.hidden_size, a.rms_norm_eps)


class Transformer(nn.Module):
    """The target (trunk). state_dict keys are HF's (lm_head.weight is the embedding when tied)."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.model = _Backbone(args)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        if self.args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.model.embed_tokens

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    def new_kv(self, capacities: Sequence[int]) -> KVPool:
        a = self.args
        return KVPool(a.num_hidden_layers, a.num_key_value_heads, a.head_dim, capacities,
                      device=self.device, dtype=self.dtype)

    def _run(self, tokens, positions, ctx: _Ctx, taps: Optional[Taps] = None) -> torch.Tensor:
        x = self.model.embed_tokens(tokens.to(self.device, non_blocking=True))
        if ctx.fast:
            return _layers_fast(self.model.layers, x, positions, self.args, ctx, taps=taps)
        positions = positions.to(x.device, non_blocking=True)
        cos, sin = rope_cos_sin(positions, self.args.head_dim, self.args.rope_theta, x.dtype)
        for i, layer in enumerate(self.model.layers):
            if taps is not None:
                taps.at(i, x)
            x = layer(x, cos, sin, ctx, i)
        if taps is not None:
            taps.at(len(self.model.layers), x)
        return x

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, kv: KVPool,
                length: Optional[int] = None, tree=None) -> torch.Tensor:
        """tokens/positions/slots [B, T] -> hidden [B, T, H] (PRE final norm). Row (b, t) is written
        at slot slots[b, t] (-1 = padding: written to the dump slot, output meaningless) and attends
        to its sequence's slots [0, slots[b, t]]. `length` = max slot + 1 (host int; see module doc).
        tree: (start [B], block [T, W] bool), a tree verify: row t attends to the slots before start
        and to slot start + u where block[t, u] (KVPool.tree_mask; the Triton path: the same rule as a
        bitmask per row, kernels/attention.py)."""
        return self._run(tokens, positions, _cached_ctx(kv, slots, length, self.args, self.dtype, tree))

    def forward_features(self, tokens, positions, slots, kv: KVPool, layers, length: Optional[int] = None,
                         tree=None) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward`, plus the residual streams at `layers` (`Taps`: an EAGLE-3 drafter's aux hidden
        states) concatenated: (hidden [B, T, H] pre final norm, features [B, T, len(layers) * H])."""
        taps = Taps(layers)
        x = self._run(tokens, positions, _cached_ctx(kv, slots, length, self.args, self.dtype, tree), taps)
        return x, taps.features()

    def forward_train_features(self, tokens: torch.Tensor, layers) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward_train` (positions 0..T-1) with the features of `forward_features`."""
        B, T = tokens.shape
        taps = Taps(layers)
        positions = torch.arange(T, device=tokens.device).expand(B, T)
        x = self._run(tokens, positions, _train_ctx(T, tokens.device, self.args.sliding_window), taps)
        return x, taps.features()

    def forward_train(self, tokens: torch.Tensor, positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """No cache, causal over the T rows (positions default 0..T-1) -> hidden [B, T, H] PRE norm."""
        B, T = tokens.shape
        if positions is None:
            positions = torch.arange(T, device=tokens.device).expand(B, T)
        return self._run(tokens, positions, _train_ctx(T, tokens.device, self.args.sliding_window))

    def logits(self, hidden: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        """fp32: as float32 (sampling, the gate); else in the activation dtype (an argmax reads bf16 as
        exactly, without the copy: runtime/kernels/top1.py)."""
        if kernels.enabled(hidden.device):
            z = linear(self.model.norm.fast(hidden), self.lm_head.weight)
        else:
            z = self.lm_head(self.model.norm(hidden))
        return z.float() if fp32 else z


# ---- the MTP module -----------------------------------------------------------------------------
class _SharedHead(nn.Module):
    def __init__(self, a: ModelArgs, own_head: bool):
        super().__init__()
        self.norm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.head = nn.Linear(a.hidden_size, a.vocab_size, bias=False) if own_head else None


class MTPModule(DecoderLayer):
    """DeepSeek-V3 MTP layer. It IS a DecoderLayer (its block parameters are named exactly like a
    trunk layer's: self_attn.*, mlp.*, input_layernorm, post_attention_layernorm) plus enorm, hnorm,
    eh_proj and shared_head.{norm, head?}. A checkpoint keeps it under its layout's names
    (runtime/layouts.py: model.layers.{N} for DeepSeek-V3, model.mtp_layers.0 for MiMo, or declared)."""

    def __init__(self, args: ModelArgs, own_head: bool = False, hidden_first: bool = False,
                 zero_first_embed: bool = False):
        super().__init__(args)
        self.args = args
        # Wiring of other layouts (runtime/layouts.py): MiMo concatenates [hidden, embed]; vLLM's
        # MiMo and DeepSeek MTP layers zero the token embedding of the row at position 0.
        self.hidden_first, self.zero_first_embed = hidden_first, zero_first_embed
        H = args.hidden_size
        self.enorm = RMSNorm(H, args.rms_norm_eps)
        self.hnorm = RMSNorm(H, args.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * H, H, bias=False)
        self.shared_head = _SharedHead(args, own_head)

    @property
    def device(self) -> torch.device:
        return self.eh_proj.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.eh_proj.weight.dtype

    def attach(self, trunk: "Transformer") -> "MTPModule":
        """Remember the trunk's embedding / lm_head (not registered: no duplicate parameters) so that
        `embed` / `lm_head` may be omitted. checkpoint.load() attaches automatically."""
        self.__dict__["_trunk_refs"] = (trunk.model.embed_tokens, trunk.lm_head)
        return self

    def new_kv(self, capacities: Sequence[int]) -> KVPool:
        a = self.args
        return KVPool(1, a.num_key_value_heads, a.head_dim, capacities, device=self.device, dtype=self.dtype)

    def _input(self, tokens, hiddens, embed, positions=None, zero_at: int = 0) -> torch.Tensor:
        if embed is None:
            embed = self._ref(0, "embed")
        if hasattr(embed, "embed_tokens"):        # a Transformer was passed
            embed = embed.embed_tokens
        e = embed(tokens.to(self.device, non_blocking=True))
        if self.zero_first_embed and positions is not None:
            e = e.masked_fill((positions.to(e.device, non_blocking=True) == zero_at)[..., None], 0)
        if kernels.enabled(e.device):       # both norms written into the halves of one buffer
            H = e.shape[-1]
            x = torch.empty(*e.shape[:-1], 2 * H, dtype=e.dtype, device=e.device)
            first, second = x[..., :H], x[..., H:]
            if self.hidden_first:
                first, second = second, first
            self.enorm.fast(e, out=first)
            self.hnorm.fast(hiddens.to(e.dtype), out=second)
            return linear(x, self.eh_proj.weight)
        parts = [self.enorm(e), self.hnorm(hiddens.to(e.dtype))]
        return self.eh_proj(torch.cat(parts[::-1] if self.hidden_first else parts, dim=-1))

    def _block(self, x, positions, ctx):
        if ctx.fast:
            return _layers_fast([self], x, positions, self.args, ctx)
        positions = positions.to(x.device, non_blocking=True)
        cos, sin = rope_cos_sin(positions, self.args.head_dim, self.args.rope_theta, x.dtype)
        return DecoderLayer.forward(self, x, cos, sin, ctx, 0)

    def _ref(self, i: int, what: str):
        refs = self.__dict__.get("_trunk_refs")
        if refs is None:
            raise ValueError(f"MTPModule: pass `{what}` or call attach(trunk) first")
        return refs[i]

    def forward(self, tokens, hiddens, positions, slots, kv: KVPool, embed=None,
                length: Optional[int] = None, zero_at: int = 0, tree=None, block: bool = True) -> torch.Tensor:
        """x = eh_proj(cat([enorm(embed(tok)), hnorm(hidden)])); out = block(x) over the MTP's own
        1-layer KVPool. Returns out [B, T, H] PRE shared_head.norm. `zero_at`: the RoPE position of
        pair key 0, whose embedding is zeroed when zero_first_embed (the caller's row space knows).
        tree: as Transformer.forward's (a tree draft's rows). block=False: x itself, the block skipped
        and nothing written (the engine's timing arm ATLAS_GLM_MTP_SKIP=block)."""
        x = self._input(tokens, hiddens, embed, positions, zero_at)
        if not block:
            return x
        return self._block(x, positions, _cached_ctx(kv, slots, length, self.args, x.dtype, tree))

    def write_kv_rows(self, tokens, hiddens, positions, slots, kv: KVPool, embed=None, zero_at: int = 0) -> None:
        """`forward`'s KV writes and nothing else (the KV-only row shortcut, the engine's
        `drafter_write_kv_row`): a row's K and V are functions of its normed input alone, so a
        context row, whose block output nobody reads, needs no attention, o_proj or MLP. The same
        ops as `forward` on the same shapes up to the write (`Attention.kv_rows`, or on the Triton
        path `write_kv_fast`: the fused qkv matmul and the RoPE + write kernel), so the pool's rows
        are `forward`'s bit for bit."""
        x = self._input(tokens, hiddens, embed, positions, zero_at)
        a = self.args
        if kv.dtype == x.dtype and kernels.enabled(kv.device):       # _cached_ctx's choice of path
            ctx = _cached_ctx(kv, slots, None, a, x.dtype)
            positions = positions.to(x.device, non_blocking=True).contiguous()
            rope = rope_table(a.head_dim, a.rope_theta, x.dtype, x.device)
            self.self_attn.write_kv_fast(self.input_layernorm.fast(x), positions, rope, ctx, 0)
            return
        cos, sin = rope_cos_sin(positions.to(x.device, non_blocking=True), a.head_dim, a.rope_theta, x.dtype)
        k, v = self.self_attn.kv_rows(self.input_layernorm(x), cos, sin)
        kv.write(0, None, k, v, flat=kv.flat(slots.to(kv.device, non_blocking=True)))

    def forward_train(self, tokens, hiddens, embed=None, positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """No cache, causal over T rows (positions default 0..T-1). Row t combines tokens[:, t] with
        hiddens[:, t]; aligning them (token t+1 with hidden t) is the caller's job."""
        B, T = tokens.shape
        if positions is None:
            positions = torch.arange(T, device=tokens.device).expand(B, T)
        x = self._input(tokens, hiddens, embed, positions, 0)
        return self._block(x, positions, _train_ctx(T, tokens.device, self.args.sliding_window))

    def draft_head(self, lm_head: nn.Module) -> tuple[nn.Module, nn.Module]:
        """(norm, linear) a draft's logits are read with: shared_head's, its head else the target's lm_head."""
        return self.shared_head.norm, (self.shared_head.head if self.shared_head.head is not None else lm_head)

    def logits(self, out: torch.Tensor, lm_head: Optional[nn.Module] = None, fp32: bool = True) -> torch.Tensor:
        """The head's logits; fp32 as Transformer.logits."""
        head = self.shared_head.head if self.shared_head.head is not None else lm_head
        if head is None:
            head = self._ref(1, "lm_head")
        if hasattr(head, "lm_head"):              # a Transformer was passed
            head = head.lm_head
        if kernels.enabled(out.device):
            z = linear(self.shared_head.norm.fast(out), head.weight)
        else:
            z = head(self.shared_head.norm(out))
        return z.float() if fp32 else z

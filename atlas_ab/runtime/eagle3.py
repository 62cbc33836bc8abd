"""The EAGLE-3 draft head: fused target features, one decoder layer over [embedding, hidden], its own norm and head.

Wiring as vLLM 0.32's `model_executor/models/llama_eagle3.py` (the layout its `eagle3` method loads):

  combine_hidden_states  fc: [B, T, n*H_t] -> [B, T, H]  the target's aux hidden states (n layers'
                         residual streams, `model.Taps`) fused; applied to target features only
  layer 0 (`midlayer`)   residual = h; x = cat([input_layernorm(embed(tok)), hidden_norm(h)])  [.., 2H]
                         (`LlamaDecoderLayer.forward`, layer_idx 0, norm_before_residual False);
                         q/k/v read 2H (`qkv_input_size = 2 * hidden_size`); residual += attn(x);
                         residual += mlp(post_attention_layernorm(residual))
  norm, lm_head          logits = lm_head(norm(residual)); the recycled hidden for the next draft is
                         the PRE-norm residual (`aux_output = hidden_prenorm`, norm_output False),
                         fed without fc (vLLM's proposer passes the drafter's own output back as is)

The token embedding is the target's (vLLM shares it when the checkpoint has no embed_tokens); the
vocabulary is the target's (no draft vocab: ours is 4,096 tokens, so no d2t/t2d maps).
Parameter names are the vLLM checkpoint's: fc, midlayer.*, norm, lm_head (`vllm_state_dict`).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn as nn

from atlas_ab.runtime import kernels
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.kernels.matmul import linear
from atlas_ab.runtime.kv import KVPool
from atlas_ab.runtime.model import MLP, Attention, RMSNorm, cached_ctx, rope_cos_sin, rope_table, train_ctx


class Eagle3Layer(nn.Module):
    """vLLM's EAGLE-3 `LlamaDecoderLayer` at layer_idx 0: a Llama layer whose q/k/v read 2H."""

    def __init__(self, a: ModelArgs):
        super().__init__()
        H = a.hidden_size
        self.self_attn = Attention(a)
        for name in ("q_proj", "k_proj", "v_proj"):        # 2H in: [embedding, hidden]
            old = getattr(self.self_attn, name)
            setattr(self.self_attn, name, nn.Linear(2 * H, old.out_features, bias=a.attention_bias))
        self.mlp = MLP(a)
        self.input_layernorm = RMSNorm(H, a.rms_norm_eps)
        self.hidden_norm = RMSNorm(H, a.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(H, a.rms_norm_eps)


class Eagle3Head(nn.Module):
    """fc + one Eagle3Layer + norm + lm_head, with its own 1-layer KV pool. `layers`: the target's
    aux hidden-state layer ids (vLLM's `eagle_aux_hidden_state_layer_ids`, sorted)."""

    def __init__(self, args: ModelArgs, layers: Sequence[int], target_hidden_size: Optional[int] = None):
        super().__init__()
        self.args = args
        self.layers = tuple(int(i) for i in layers)
        self.target_hidden_size = target_hidden_size or args.hidden_size
        H = args.hidden_size
        self.fc = nn.Linear(len(self.layers) * self.target_hidden_size, H, bias=False)
        self.midlayer = Eagle3Layer(args)
        self.norm = RMSNorm(H, args.rms_norm_eps)
        self.lm_head = nn.Linear(H, args.vocab_size, bias=False)

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @property
    def feature_size(self) -> int:
        return self.fc.in_features

    def new_kv(self, capacities: Sequence[int]) -> KVPool:
        a = self.args
        return KVPool(1, a.num_key_value_heads, a.head_dim, capacities, device=self.device, dtype=self.dtype)

    def combine(self, features: torch.Tensor) -> torch.Tensor:
        """vLLM's `combine_hidden_states`: the target's features [..., n*H_t] -> [..., H]."""
        x = features.to(self.dtype)
        return linear(x, self.fc.weight) if kernels.enabled(x.device) else self.fc(x)

    def _input(self, tokens, hidden, embed) -> torch.Tensor:
        e = embed(tokens.to(self.device, non_blocking=True))
        m = self.midlayer
        return torch.cat([m.input_layernorm(e), m.hidden_norm(hidden.to(e.dtype))], dim=-1)

    def _layer(self, x, hidden, positions, ctx) -> torch.Tensor:
        m = self.midlayer
        positions = positions.to(x.device, non_blocking=True)
        if ctx.fast:
            rope = rope_table(self.args.head_dim, self.args.rope_theta, x.dtype, x.device)
            a = m.self_attn.forward_fast(x, positions.contiguous(), rope, ctx, 0)
            r = hidden.to(x.dtype) + a
            return r + m.mlp.forward_fast(m.post_attention_layernorm.fast(r))
        cos, sin = rope_cos_sin(positions, self.args.head_dim, self.args.rope_theta, x.dtype)
        r = hidden.to(x.dtype) + m.self_attn(x, cos, sin, ctx, 0)
        return r + m.mlp(m.post_attention_layernorm(r))

    def forward(self, tokens, hiddens, positions, slots, kv: KVPool, embed, length: Optional[int] = None,
                zero_at: int = 0, tree=None) -> torch.Tensor:
        """One layer over the head's own KV: tokens/positions/slots [B, T], hiddens [B, T, H] (already
        combined: `combine` of target features, or the head's own recycled output). Returns the
        residual stream [B, T, H] PRE norm (the next draft's hidden). `zero_at`: unused (no embedding
        is zeroed; the MTP module's signature)."""
        x = self._input(tokens, hiddens, embed)
        ctx = cached_ctx(kv, slots, length, self.args, x.dtype, tree)
        return self._layer(x, hiddens, positions, ctx)

    def forward_train(self, tokens, hiddens, embed, positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """No cache, causal over T rows (positions default 0..T-1); hiddens [B, T, H] already combined."""
        B, T = tokens.shape
        if positions is None:
            positions = torch.arange(T, device=tokens.device).expand(B, T)
        x = self._input(tokens, hiddens, embed)
        return self._layer(x, hiddens, positions, train_ctx(T, tokens.device, self.args.sliding_window))

    def draft_head(self, lm_head=None) -> tuple[nn.Module, nn.Module]:
        """(norm, linear) a draft's logits are read with: the head's own (the target's lm_head unused)."""
        return self.norm, self.lm_head

    def logits(self, out: torch.Tensor, lm_head=None, fp32: bool = True) -> torch.Tensor:
        """lm_head(norm(out)); `lm_head` unused (the head's own). fp32 as Transformer.logits."""
        if kernels.enabled(out.device):
            z = linear(self.norm.fast(out), self.lm_head.weight)
        else:
            z = self.lm_head(self.norm(out))
        return z.float() if fp32 else z


def vllm_state_dict(head: Eagle3Head) -> dict[str, torch.Tensor]:
    """The head's tensors under the names vLLM's `Eagle3LlamaForCausalLM.load_weights` reads: fc.weight,
    midlayer.{self_attn,mlp,*norm}.*, norm.weight, lm_head.weight (no embed_tokens: the target's is shared)."""
    return {k: v.detach().contiguous() for k, v in head.state_dict().items()}


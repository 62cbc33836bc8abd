"""ModelArgs: the architecture of a Llama-family decoder, read from / written to HF config.json.

Supported layouts (model_type): llama, mistral, qwen2, qwen3, mimo.
  llama    attention_bias -> bias on q/k/v/o (off by default)
  qwen2    bias on q/k/v (always), none on o
  mimo     Xiaomi MiMo: a qwen2 trunk (its MTP layers: runtime/layouts.py)
  qwen3    per-head RMSNorm on q and k (q_norm/k_norm), explicit head_dim
  mistral  as llama, plus an optional sliding window
Anything we do not implement (rope scaling, other activations, MLP bias, Qwen's per-layer
sliding windows, more than one MTP layer) is refused with a one-line AtlasError.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

from atlas_ab import AtlasError

_ARCH = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
         "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "mimo": "MiMoForCausalLM"}
_QWEN2_LIKE = ("qwen2", "mimo")     # bias on q/k/v, none on o


@dataclass(frozen=True)
class ModelArgs:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    attention_bias: bool = False        # bias on q/k/v projections (Qwen2; Llama's attention_bias)
    qk_norm: bool = False               # Qwen3 per-head q_norm / k_norm
    num_nextn_predict_layers: int = 0   # 0 or 1 (MTP module)
    model_type: str = "llama"
    o_bias: bool = False                # bias on o_proj (Llama/Qwen3 attention_bias=True; never Qwen2)
    sliding_window: Optional[int] = None  # Mistral: a query at slot s sees slots (s - window, s]
    max_position_embeddings: int = 4096  # informational (RoPE is computed on the fly)

    def __post_init__(self):
        if self.model_type not in _ARCH:
            raise AtlasError(f"unsupported model_type {self.model_type!r} (supported: {', '.join(_ARCH)})")
        if self.num_attention_heads % self.num_key_value_heads:
            raise AtlasError(f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads={self.num_key_value_heads}")
        if self.head_dim % 2:
            raise AtlasError(f"head_dim={self.head_dim} must be even for RoPE")
        if self.num_nextn_predict_layers not in (0, 1):
            raise AtlasError(f"num_nextn_predict_layers={self.num_nextn_predict_layers} unsupported (0 or 1)")

    @classmethod
    def from_hf(cls, cfg: dict) -> "ModelArgs":
        """Parse a HF config.json dict (transformers 4.x `rope_theta`/`rope_scaling` or 5.x `rope_parameters`)."""
        mt = cfg.get("model_type", "llama")
        if mt not in _ARCH:
            raise AtlasError(f"unsupported model_type {mt!r} in config.json (supported: {', '.join(_ARCH)})")
        try:
            H, nh = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
            need = {k: cfg[k] for k in ("vocab_size", "intermediate_size", "num_hidden_layers")}
        except KeyError as e:
            raise AtlasError(f"config.json lacks {e.args[0]!r}") from None
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise AtlasError(f"unsupported hidden_act {act!r} (only silu)")
        if cfg.get("mlp_bias"):
            raise AtlasError("unsupported mlp_bias=true")
        rp = cfg.get("rope_parameters") or {}
        rs = cfg.get("rope_scaling") or {}
        for d in (rp, rs):
            rtype = d.get("rope_type", d.get("type", "default"))
            if rtype not in (None, "default"):
                raise AtlasError(f"unsupported rope scaling {rtype!r} (only null/'default')")
        if float(rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))) != 1.0:
            raise AtlasError("unsupported partial_rotary_factor != 1")
        theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
        sw = None
        if mt == "mistral":
            sw = cfg.get("sliding_window")
        elif mt in ("qwen2", "qwen3", "mimo") and cfg.get("use_sliding_window"):
            raise AtlasError(f"unsupported use_sliding_window=true for {mt}")
        if cfg.get("layer_types") and any(t != "full_attention" for t in cfg["layer_types"]) and mt != "mistral":
            raise AtlasError("unsupported layer_types other than full_attention")
        bias = bool(cfg.get("attention_bias", False)) if mt in ("llama", "qwen3") else False
        return cls(
            vocab_size=int(need["vocab_size"]), hidden_size=H,
            intermediate_size=int(need["intermediate_size"]),
            num_hidden_layers=int(need["num_hidden_layers"]), num_attention_heads=nh,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or nh),
            head_dim=int(cfg.get("head_dim") or H // nh),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=float(theta),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=True if mt in _QWEN2_LIKE else bias,
            qk_norm=(mt == "qwen3"),
            num_nextn_predict_layers=int(cfg.get("num_nextn_predict_layers", 0) or 0),
            model_type=mt,
            o_bias=False if mt in _QWEN2_LIKE else bias,
            sliding_window=int(sw) if sw else None,
            max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
        )

    def to_hf(self, dtype: str = "bfloat16") -> dict:
        """A config.json dict that transformers' XForCausalLM loads (and from_hf reads back)."""
        d = {
            "architectures": [_ARCH[self.model_type]], "model_type": self.model_type,
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim, "hidden_act": "silu", "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta, "rope_scaling": None,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "num_nextn_predict_layers": self.num_nextn_predict_layers,
            "dtype": dtype, "torch_dtype": dtype,
        }
        if self.model_type in _QWEN2_LIKE:
            if self.o_bias:
                raise AtlasError(f"{self.model_type} layout has no o_proj bias")
        elif self.model_type == "mistral":
            if self.attention_bias or self.o_bias:
                raise AtlasError("mistral layout has no attention bias")
        else:
            if self.attention_bias != self.o_bias:
                raise AtlasError(f"{self.model_type} layout: attention_bias covers q/k/v and o together")
            d["attention_bias"] = self.attention_bias
        if self.model_type == "llama":
            d["mlp_bias"] = False
        if self.model_type in ("qwen2", "qwen3", "mimo"):
            d["use_sliding_window"] = False
        if self.model_type == "mistral":
            d["sliding_window"] = self.sliding_window
        return d

    def as_dict(self) -> dict:
        return asdict(self)

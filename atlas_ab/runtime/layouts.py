"""MTP layouts: where a checkpoint keeps its MTP layer and how that layer is wired (the key map).

One mechanism for every checkpoint: a key map (`MTPLayout`) names the MTP layer's tensors and
states its wiring; the loader (checkpoint.py) renames the checkpoint's tensors to the module's
own names (MTPModule: enorm, hnorm, eh_proj, shared_head.norm, shared_head.head, and a decoder
block named like a trunk layer) through it, and the drafter reads the wiring from it. The
built-in layouts are instances of the same map:

  deepseek_v3  model.layers.{N}.{enorm, hnorm, eh_proj, shared_head.norm, shared_head.head?}
               + the block under the same prefix; eh_proj(cat(enorm(embed), hnorm(hidden)))
  mimo         model.mtp_layers.0.{token_layernorm, hidden_layernorm, input_proj, final_layernorm}
               + a Qwen2 block under the same prefix; input_proj(cat(hidden_layernorm(hidden),
               token_layernorm(embed))): the OTHER order

Any other Llama-family checkpoint declares its map, either in config.json under "atlas_mtp" or
in an `atlas_mtp.yaml` next to it (docs/checkpoints.md). A declaration may start from a
built-in (`layout: deepseek_v3`) and override fields, e.g. the handoff.

The handoff (which hidden the MTP layer is handed) is part of the map:
  handoff_norm  pre | post: the trunk's hidden before or after the trunk's final norm, for every
                target hidden the drafter consumes (draft 1, context and catch-up rows, ORACLE_P2)
  recycle_norm  pre | post: the MTP layer's own output before or after its final norm, for
                drafts 2+ (the drafter's own hidden)
Engines get this wrong silently (vllm-project/vllm PR #47448, ROCm/ATOM PR #1764,
waybarrios/vllm-mlx #657), so the arm can also override it (levers handoff_norm / recycle_norm).

Trunks we do not implement are refused with one line naming the config field that says so
(`refuse_unsupported`): MoE, MLA attention, linear-attention hybrids.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from atlas_ab import AtlasError

NORMS = ("pre", "post")
NORM_FIELDS = ("handoff_norm", "recycle_norm")
ORDERS = (("embed", "hidden"), ("hidden", "embed"))
KEY = "atlas_mtp"                 # the key map's key in config.json
YAML = "atlas_mtp.yaml"           # ... or this file next to config.json

# The module's own names (MTPModule) of each role the key map renames.
ROLES = {"embed_norm": "enorm", "hidden_norm": "hnorm", "proj": "eh_proj", "final_norm": "shared_head.norm",
         "head": "shared_head.head"}


@dataclass(frozen=True)
class MTPLayout:
    """The key map of one MTP layer. Tensor names are relative to `prefix`; `{num_hidden_layers}`
    in the prefix is the trunk's layer count."""
    name: str
    prefix: str
    embed_norm: str                    # RMSNorm on the token embedding
    hidden_norm: str                   # RMSNorm on the hidden handed over
    proj: str                          # Linear(2H -> H, no bias) over the concatenation
    final_norm: str                    # RMSNorm before the head (and the recycled hidden if recycle_norm=post)
    concat: tuple = ("embed", "hidden")  # order of the projection's input halves
    block: str = ""                    # sub-prefix of the decoder block (self_attn.*, mlp.*, *_layernorm)
    head: Optional[str] = None         # the layer's own head when the file has one there, else the trunk's lm_head
    embed_copy: Optional[str] = None   # a stored copy of the trunk's embedding (checked equal, not kept)
    zero_first_embed: bool = False     # zero the token embedding of the row of pair key 0 (vLLM: positions == 0)
    handoff_norm: str = "pre"
    recycle_norm: str = "pre"
    source: str = ""                   # where handoff_norm / recycle_norm were declared

    def __post_init__(self):
        for f in NORM_FIELDS:
            if getattr(self, f) not in NORMS:
                raise AtlasError(f"MTP key map {self.name!r}: {f}={getattr(self, f)!r} must be 'pre' or 'post'")
        if tuple(self.concat) not in ORDERS:
            raise AtlasError(f"MTP key map {self.name!r}: concat={list(self.concat)!r} must be "
                             "['embed', 'hidden'] or ['hidden', 'embed']")
        object.__setattr__(self, "concat", tuple(self.concat))

    @property
    def hidden_first(self) -> bool:
        return self.concat[0] == "hidden"

    def prefix_for(self, num_hidden_layers: int) -> str:
        return self.prefix.replace("{num_hidden_layers}", str(num_hidden_layers))

    def checkpoint_name(self, module_name: str, num_hidden_layers: int) -> str:
        """The checkpoint's name of one of MTPModule's state_dict entries."""
        pre = self.prefix_for(num_hidden_layers)
        for role, own in ROLES.items():
            if module_name.startswith(own + "."):
                theirs = getattr(self, role)
                if theirs is None:
                    raise AtlasError(f"MTP key map {self.name!r} names no {role}")
                return pre + theirs + module_name[len(own):]
        return pre + self.block + module_name

    def handoff(self) -> dict:
        """The manifest's record of the declared handoff."""
        return {"handoff_norm": self.handoff_norm, "recycle_norm": self.recycle_norm, "source": self.source}

    def declaration(self) -> dict:
        """This map as a config.json "atlas_mtp" entry: the built-in it starts from and the fields
        that differ from it (all of them without one), the handoff always explicit."""
        base = BUILTIN.get(self.name.split("+")[0])
        d = {"layout": base.name} if base is not None else {}
        for f in sorted(_FIELDS):
            v = getattr(self, f)
            if base is None or v != getattr(base, f) or f in NORM_FIELDS:
                d[f] = list(v) if f == "concat" else v
        return d


# vLLM's deepseek_mtp.py: eh_proj(cat([enorm(inputs_embeds), hnorm(previous_hidden_states)])),
# inputs_embeds[positions == 0] = 0; logits = shared_head.head(shared_head.norm(out)). The hidden
# handed over is the trunk's output after model.norm (DeepseekV2Model.forward returns the normed
# stream); the recycled one is post shared_head.norm (the fix of ROCm/ATOM PR #1764, and of
# vllm-project/vllm PR #47448 for GLM / DeepSeek-V3.2). A stored MTP copy of the embedding
# (model.layers.{N}.embed_tokens) is the trunk's (DeepSeek-V3 report: the MTP shares it).
DEEPSEEK_V3 = MTPLayout(
    name="deepseek_v3", prefix="model.layers.{num_hidden_layers}.", embed_norm="enorm", hidden_norm="hnorm",
    proj="eh_proj", final_norm="shared_head.norm", head="shared_head.head", embed_copy="embed_tokens",
    concat=("embed", "hidden"), zero_first_embed=True, handoff_norm="post", recycle_norm="post",
    source="default for layout deepseek_v3")

# vLLM vllm/model_executor/models/mimo_mtp.py (vllm-project/vllm@0bb55d60), MiMoMultiTokenPredictorLayer:
#   L77  inputs_embeds[positions == 0] = 0
#   L82  input_proj(torch.cat([previous_hidden_states, inputs_embeds], dim=-1))   (hidden first)
#   L89  return self.final_layernorm(hidden_states)   -> compute_logits applies lm_head only, and
#        the hidden recycled into the next draft is that normed output: recycle_norm = post.
# vllm/model_executor/models/mimo.py (vllm-project/vllm@055e47c2), MiMoModel.forward:
#   L85-86  hidden_states = hidden_states + residual; return hidden_states   (no final norm;
#        MiMoForCausalLM.compute_logits applies self.model.norm), and that pre-norm stream is what
#        the MTP layer receives as previous_hidden_states: handoff_norm = pre.
# Embedding and lm_head are the trunk's (no MTP copy in the checkpoint).
MIMO = MTPLayout(
    name="mimo", prefix="model.mtp_layers.0.", embed_norm="token_layernorm", hidden_norm="hidden_layernorm",
    proj="input_proj", final_norm="final_layernorm", head=None, embed_copy=None,
    concat=("hidden", "embed"), zero_first_embed=True, handoff_norm="pre", recycle_norm="post",
    source="default for layout mimo")

BUILTIN = {lay.name: lay for lay in (DEEPSEEK_V3, MIMO)}

# What atlas_ab's own trainer builds and checkpoint.save writes: the DeepSeek-V3 names, trained
# with the PRE-final-norm hidden for both inputs (train.py feeds forward_train's hidden, and the
# drafter's own block output for later depths), and no zeroed embedding.
TRAINED_HERE = dataclasses.replace(DEEPSEEK_V3, name="deepseek_v3+declared", zero_first_embed=False,
                                   handoff_norm="pre", recycle_norm="pre", source="config.json")

_FIELDS = {f.name for f in dataclasses.fields(MTPLayout)} - {"name", "source"}
_NAMING = ("prefix", "embed_norm", "hidden_norm", "proj", "final_norm")


def _from_declaration(decl, where: str) -> MTPLayout:
    if not isinstance(decl, dict):
        raise AtlasError(f"{where}: the MTP key map must be a mapping, got {type(decl).__name__}")
    decl = dict(decl)
    base_name = decl.pop("layout", None)
    unknown = sorted(k for k in decl if k not in _FIELDS)
    if unknown:
        raise AtlasError(f"{where}: unknown MTP key map field {unknown[0]!r} "
                         f"(fields: layout, {', '.join(sorted(_FIELDS))})")
    if base_name is not None:
        if base_name not in BUILTIN:
            raise AtlasError(f"{where}: layout={base_name!r} is not a built-in layout ({', '.join(BUILTIN)})")
        base = BUILTIN[base_name]
    else:
        missing = [k for k in _NAMING + NORM_FIELDS if k not in decl]
        if missing:
            raise AtlasError(f"{where}: the MTP key map needs {missing[0]!r} (or a built-in `layout` to start from)")
        base = MTPLayout(name="declared", **{k: decl[k] for k in _NAMING})
    source = where if any(f in decl for f in NORM_FIELDS) else base.source
    if "concat" in decl and not isinstance(decl["concat"], (list, tuple)):
        raise AtlasError(f"{where}: concat must be a list, e.g. [embed, hidden]")
    lay = dataclasses.replace(base, source=source, **decl)
    rewired = base_name is None or any(getattr(lay, f) != getattr(base, f) for f in _FIELDS - set(NORM_FIELDS))
    return dataclasses.replace(lay, name=(f"{base_name}+declared" if base_name else "declared") if rewired
                               else base_name)


def declared(cfg: dict, d: Path) -> Optional[MTPLayout]:
    """The checkpoint's own key map: config.json "atlas_mtp" or atlas_mtp.yaml (not both)."""
    in_cfg = cfg.get(KEY)
    yml = d / YAML
    if in_cfg is not None and yml.is_file():
        raise AtlasError(f"{d}: the MTP key map is declared twice (config.json '{KEY}' and {YAML}); keep one")
    if in_cfg is not None:
        return _from_declaration(in_cfg, "config.json")
    if yml.is_file():
        import yaml
        try:
            decl = yaml.safe_load(yml.read_text())
        except Exception as e:
            raise AtlasError(f"{yml}: invalid YAML ({str(e).splitlines()[0]})") from None
        return _from_declaration(decl, YAML)
    return None


def key_map_files(d: Path) -> list[Path]:
    """Files beside the weights that change what runs (hashed into the checkpoint's hash)."""
    return [d / YAML] if (d / YAML).is_file() else []


# ---- what we refuse, by the config field that gives it away -------------------------------------
_MOE = ("n_routed_experts", "num_experts", "num_local_experts", "moe_intermediate_size")
_MLA = ("kv_lora_rank", "q_lora_rank")
_LINEAR = ("linear_num_value_heads", "linear_key_head_dim", "linear_conv_kernel_dim")


def refuse_unsupported(cfg: dict, where: str) -> None:
    """One line naming the config.json field of a trunk we do not implement."""
    found = []
    moe = next((k for k in _MOE if cfg.get(k)), None)
    if moe:
        found.append(f"a MoE trunk ({moe}={cfg[moe]}: routed experts are not implemented)")
    mla = next((k for k in _MLA if cfg.get(k)), None)
    if mla:
        found.append(f"MLA attention ({mla}={cfg[mla]}: latent KV is not implemented)")
    kinds = [t for t in (cfg.get("layer_types") or []) if t not in ("full_attention", "sliding_attention")]
    lin = next((k for k in _LINEAR if cfg.get(k)), None)
    if kinds:
        found.append(f"a linear-attention hybrid (layer_types has {kinds[0]!r})")
    elif lin:
        found.append(f"a linear-attention hybrid ({lin}={cfg[lin]})")
    if found:
        mt = cfg.get("model_type", "?")
        raise AtlasError(f"{where}: unsupported checkpoint (model_type {mt!r}): config.json declares "
                         + " and ".join(found) + "; only dense Llama-family trunks are supported")


def detect(cfg: dict, keys, num_hidden_layers: int, d: Path) -> Optional[MTPLayout]:
    """The MTP layout of a checkpoint with num_nextn_predict_layers >= 1: its declared key map,
    else MiMo by model_type/architectures, else DeepSeek-V3 by its keys; one line if none fits."""
    lay = declared(cfg, d)
    if lay is not None:
        return lay
    keys = set(keys)
    if cfg.get("model_type") == "mimo" or "MiMoForCausalLM" in (cfg.get("architectures") or []):
        return MIMO
    for lay in BUILTIN.values():
        if lay.checkpoint_name("eh_proj.weight", num_hidden_layers) in keys:
            return lay
    tried = ", ".join(lay.checkpoint_name("eh_proj.weight", num_hidden_layers) for lay in BUILTIN.values())
    raise AtlasError(f"{d}: num_nextn_predict_layers >= 1 but no MTP layer of a known layout ({tried} "
                     f"absent); declare its key map in config.json '{KEY}' or {YAML} (docs/checkpoints.md)")


def handoff_in_effect(layout: MTPLayout, handoff_lever: str = "checkpoint", recycle_lever: str = "checkpoint") -> dict:
    """The manifest's `model.handoff`: what the checkpoint declares (and where), and what the arm ran
    (the levers handoff_norm / recycle_norm override the declaration unless they say `checkpoint`)."""
    return {**layout.handoff(), "layout": layout.name,
            "in_effect": {"handoff_norm": layout.handoff_norm if handoff_lever == "checkpoint" else handoff_lever,
                          "recycle_norm": layout.recycle_norm if recycle_lever == "checkpoint" else recycle_lever}}

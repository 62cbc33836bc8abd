"""An EAGLE-3 head's config.json, read and checked without torch (the config refuses a head whose feature
layers the target lacks before any model loads); runtime/eagle3_checkpoint.py writes and loads the head.

The layout is vLLM 0.32's for its `eagle3` method: architectures ["LlamaForCausalLMEagle3"] (its model
registry maps it to `llama_eagle3.Eagle3LlamaForCausalLM`), one layer, the target's aux layers as
`eagle_aux_hidden_state_layer_ids` (top level, or in `eagle_config`: vLLM's gpu_model_runner reads
either), `target_hidden_size`, `draft_vocab_size` equal to `vocab_size` (no d2t/t2d maps).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Union

from atlas_ab import AtlasError

ARCHITECTURE = "LlamaForCausalLMEagle3"
#: the architectures vLLM 0.32 maps to Eagle3LlamaForCausalLM that are Llama-shaped (model_executor/models/registry.py)
ARCHITECTURES = (ARCHITECTURE, "Eagle3LlamaForCausalLM")


def read_config(path: Union[str, os.PathLike]) -> dict:
    """The head's config.json, checked to be an EAGLE-3 Llama head of one layer with its aux layer ids."""
    d = Path(path)
    cfg_path = d / "config.json"
    if not d.is_dir():
        raise AtlasError(f"EAGLE-3 checkpoint directory not found: {d}")
    try:
        cfg = json.loads(cfg_path.read_text())
    except OSError:
        raise AtlasError(f"{d}: missing config.json") from None
    except ValueError as e:
        raise AtlasError(f"{cfg_path}: invalid JSON ({e})") from None
    archs = cfg.get("architectures") or []
    if not any(a in ARCHITECTURES for a in archs):
        raise AtlasError(f"{cfg_path}: architectures={archs} is not an EAGLE-3 Llama head ({ARCHITECTURE})")
    if cfg.get("num_hidden_layers", 1) != 1:
        raise AtlasError(f"{cfg_path}: num_hidden_layers={cfg.get('num_hidden_layers')}: one layer is supported")
    if cfg.get("draft_vocab_size", cfg.get("vocab_size")) != cfg.get("vocab_size"):
        raise AtlasError(f"{cfg_path}: draft_vocab_size={cfg.get('draft_vocab_size')} != vocab_size="
                         f"{cfg.get('vocab_size')} (a reduced draft vocabulary is not supported)")
    cfg["eagle_aux_hidden_state_layer_ids"] = layer_ids(cfg, cfg_path)
    return cfg


def layer_ids(cfg: dict, where) -> list[int]:
    """The aux layer ids, where vLLM looks for them (top level, else eagle_config), strictly increasing."""
    ids = cfg.get("eagle_aux_hidden_state_layer_ids") or (cfg.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids")
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise AtlasError(f"{where}: eagle_aux_hidden_state_layer_ids={ids!r} must be a list of layer ids")
    if list(ids) != sorted(set(ids)):
        # vLLM sorts and de-duplicates them (EagleModelMixin._set_aux_hidden_state_layers): fc's input order
        raise AtlasError(f"{where}: eagle_aux_hidden_state_layer_ids={ids} must be strictly increasing "
                         "(vLLM concatenates the layers in sorted order)")
    return list(ids)


def check_layers(head_path, target_path) -> None:
    """One line naming the head and the layer when a feature layer is not in the target: ids run
    0 .. num_hidden_layers (id i: the stream entering layer i; the last: the final layer's output)."""
    cfg = read_config(head_path)
    try:
        target = json.loads((Path(target_path) / "config.json").read_text())
    except (OSError, ValueError):
        return          # the target's own load reports its directory
    n = target.get("num_hidden_layers")
    ids = cfg["eagle_aux_hidden_state_layer_ids"]
    bad = [i for i in ids if not isinstance(n, int) or not 0 <= i <= n]
    if bad:
        raise AtlasError(f"{head_path}: EAGLE-3 feature layer {bad[0]} does not exist in the target {target_path} "
                         f"({n} layers: ids 0..{n}); eagle_aux_hidden_state_layer_ids={ids}")
    th = cfg.get("target_hidden_size", cfg.get("hidden_size"))
    if th != target.get("hidden_size"):
        raise AtlasError(f"{head_path}: target_hidden_size={th} but the target {target_path} has hidden_size="
                         f"{target.get('hidden_size')}")


def default_layers(num_layers: int) -> list[int]:
    """A low, a middle and a high layer: vLLM's default (2, L//2, L-3) when those are three distinct ids,
    else (1, L//2, L-1) (a shallow target: 6 layers give (1, 3, 5))."""
    for ids in ((2, num_layers // 2, num_layers - 3), (1, num_layers // 2, num_layers - 1)):
        if len(set(ids)) == 3 and ids == tuple(sorted(ids)) and ids[0] >= 0:
            return list(ids)
    raise AtlasError(f"a target of {num_layers} layers has no three distinct feature layers; pass --layers")


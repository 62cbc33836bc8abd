"""An EAGLE-3 head's directory, in the layout vLLM 0.32's `eagle3` method loads (and ours reads back).

  config.json        a Llama config of one layer: architectures ["LlamaForCausalLMEagle3"] (vLLM's
                     model registry maps it to `llama_eagle3.Eagle3LlamaForCausalLM`), the target's
                     aux layers as `eagle_aux_hidden_state_layer_ids` (top level and in `eagle_config`,
                     where vLLM's gpu_model_runner reads either), `target_hidden_size`, `draft_vocab_size`
                     equal to `vocab_size` (no d2t/t2d maps: the full vocabulary)
  model.safetensors  fc.weight, midlayer.*, norm.weight, lm_head.weight: the names
                     `Eagle3LlamaForCausalLM.load_weights` reads (it prefixes "model." and maps
                     "midlayer." to "layers.0."); no embed_tokens, so vLLM shares the target's

config/eagle3.py reads and checks config.json without torch (`read_config`, `check_layers`: a run
refuses a head whose feature layers the target lacks before any model loads).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Union

from atlas_ab import AtlasError
from atlas_ab.config.eagle3 import ARCHITECTURE, check_layers, default_layers, read_config  # noqa: F401


def save(path: Union[str, os.PathLike], head, target_args, dtype=None, training: dict | None = None) -> str:
    """config.json + model.safetensors in vLLM's eagle3 layout (the module docstring); returns the hash.
    `target_args`: the target's ModelArgs (the head's config is its shape with one layer)."""
    import dataclasses

    import torch
    from safetensors.torch import save_file

    from atlas_ab.runtime.checkpoint import file_hash

    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    dtype = dtype or torch.bfloat16
    args = dataclasses.replace(head.args, num_hidden_layers=1, num_nextn_predict_layers=0, tie_word_embeddings=False)
    cfg = args.to_hf(dtype=str(dtype).replace("torch.", ""))
    ids = list(head.layers)
    cfg.update({"architectures": [ARCHITECTURE], "model_type": "llama", "draft_vocab_size": args.vocab_size,
                "target_hidden_size": target_args.hidden_size, "eagle_aux_hidden_state_layer_ids": ids,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}})
    cfg.pop("num_nextn_predict_layers", None)
    if training:
        cfg["atlas_eagle3_training"] = training
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in head.state_dict().items()}
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    return file_hash([d / "config.json", d / "model.safetensors"])


def load(path: Union[str, os.PathLike], device="cpu", dtype=None):
    """(Eagle3Head, hash): the head of `path`, every tensor present with its shape, none extra."""
    import torch
    from safetensors.torch import load_file

    from atlas_ab.runtime.args import ModelArgs
    from atlas_ab.runtime.checkpoint import file_hash
    from atlas_ab.runtime.eagle3 import Eagle3Head

    d = Path(path)
    cfg = read_config(d)
    st = d / "model.safetensors"
    if not st.is_file():
        raise AtlasError(f"{d}: no model.safetensors")
    args = ModelArgs.from_hf({**cfg, "num_nextn_predict_layers": 0, "tie_word_embeddings": False})
    head = Eagle3Head(args, cfg["eagle_aux_hidden_state_layer_ids"], cfg.get("target_hidden_size"))
    try:
        tensors = load_file(str(st), device="cpu")
    except Exception as e:  # noqa: BLE001 - a corrupt file is one line
        raise AtlasError(f"{st}: corrupt safetensors ({str(e).splitlines()[0]})") from None
    want = head.state_dict()
    for names, what in (([k for k in want if k not in tensors], "missing"),
                        (sorted(k for k in tensors if k not in want), "unexpected")):
        if names:
            more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
            raise AtlasError(f"{d}: {what} tensor {names[0]}{more}")
    for k, v in want.items():
        if tensors[k].shape != v.shape:
            raise AtlasError(f"{d}: tensor {k} has shape {tuple(tensors[k].shape)}, expected {tuple(v.shape)}")
    head.load_state_dict({k: t.to(dtype or torch.float32) for k, t in tensors.items()})
    return head.to(device).eval(), file_hash([d / "config.json", st])

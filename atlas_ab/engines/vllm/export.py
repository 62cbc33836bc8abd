"""Our checkpoint as the MiMo layout vLLM serves with its `mtp` method (`mimo_mtp`).

Why MiMo: of the architectures vLLM 0.32 serves with an MTP drafter, MiMo (vllm/model_executor/
models/mimo.py, mimo_mtp.py) is the one whose trunk is a plain dense decoder: a Qwen2 trunk, which is
our Llama trunk exactly once its q/k/v biases are zero. The others need MoE or MLA tensors
(deepseek_mtp, glm4_moe_mtp), linear attention (qwen3_next_mtp) or sliding windows (mimo_v2_mtp), so
they would compute something else. vLLM's Llama refuses the MTP layer outright.

What the rewrite changes, each exactly:
  trunk     the same tensors, plus zero q/k/v biases (Qwen2 always has them)
  MTP layer model.layers.{N}.{enorm, hnorm, eh_proj, shared_head.norm} ->
            model.mtp_layers.0.{token_layernorm, hidden_layernorm, input_proj, final_layernorm};
            input_proj is eh_proj with its two input halves swapped (MiMo concatenates
            [hidden, embed], DeepSeek-V3 [embed, hidden]); the block's tensors keep their names
  config    model_type "qwen2" (transformers has no "mimo" config, and vLLM reads its config
            through transformers), architectures ["MiMoForCausalLM"]; `atlas_mtp` declares the
            wiring vLLM runs (runtime/layouts.py MIMO: pre-norm handoff, post-norm recycle, the
            embedding zeroed at position 0), so our runner on this directory computes vLLM's drafter
  tokenizer also in tokenizer/ alone (tokenizer.json + a tokenizer_config.json naming
            PreTrainedTokenizerFast), served with --tokenizer: beside a config.json saying qwen2,
            transformers 5 builds Qwen2's tokenizer class whatever tokenizer_config.json says, and
            that class replaces our pre-tokenizer (`def fibonacci(n):` then splits into other tokens)
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import torch

from atlas_ab import AtlasError
from atlas_ab.runtime import checkpoint, layouts
from atlas_ab.runtime.model import MTPModule, Transformer

ARCHITECTURE = "MiMoForCausalLM"
EXPORT_JSON = "atlas_export.json"        # what was exported from what (written last)
TOKENIZER_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
                    "bos_token": None, "add_bos_token": False, "clean_up_tokenization_spaces": False,
                    "model_max_length": 4096}


def _with_zero_qkv_bias(dst: torch.nn.Module, state: dict, what: str) -> torch.nn.Module:
    """`dst` loaded from `state`, whose only missing tensors must be q/k/v biases (Qwen2 has them,
    a Llama has none): they are zeroed, which computes the same function."""
    missing, unexpected = dst.load_state_dict(state, strict=False)
    if unexpected or any(not k.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")) for k in missing):
        raise AtlasError(f"{what} does not map: missing {missing[:3]}, unexpected {unexpected[:3]}")
    with torch.no_grad():
        for k in missing:
            dst.get_parameter(k).zero_()
    return dst


def _qwen2_trunk(src: Transformer, args) -> Transformer:
    """The Qwen2 trunk computing `src`'s function: same weights, zero q/k/v biases."""
    return _with_zero_qkv_bias(Transformer(args), src.state_dict(), "trunk onto Qwen2")


def _mimo_mtp(src: MTPModule, args) -> MTPModule:
    """The MTP layer wired as MiMo: [hidden, embed] input halves, zero q/k/v biases, the embedding of
    position 0 zeroed (what vLLM's mimo_mtp.py does; our checkpoint's declaration may not)."""
    dst = MTPModule(args, own_head=src.shared_head.head is not None, hidden_first=True, zero_first_embed=True)
    state = dict(src.state_dict())
    w = state["eh_proj.weight"]                                   # [H, 2H]
    H = w.shape[0]
    halves = (w[:, H:], w[:, :H]) if not src.hidden_first else (w[:, :H], w[:, H:])
    state["eh_proj.weight"] = torch.cat(halves, dim=1)            # [H, 2H], hidden half first
    return _with_zero_qkv_bias(dst, state, "MTP layer onto MiMo")


#: the trunk alone, for the drafters that bring their own weights (eagle3): vLLM's Qwen2 hands them its
#: aux hidden states, MiMo's forward does not ("too many values to unpack" at the first request)
TRUNK_ARCHITECTURE = "Qwen2ForCausalLM"


def export(src_dir, out_dir, mtp: bool = True) -> dict:
    """Write `src_dir` (any checkpoint we load, with one MTP layer) as a MiMo directory at `out_dir`
    (`mtp` False: its trunk alone, as a Qwen2 directory). Returns {"path", "hash", "source",
    "source_hash"}. One line (AtlasError) if it cannot."""
    ck = checkpoint.load(src_dir, dtype=torch.float32)
    if ck.mtp is None and mtp:
        raise AtlasError(f"{src_dir}: no MTP layer (num_nextn_predict_layers: 0): nothing for vLLM's mtp to run")
    a = ck.args
    if a.model_type not in ("llama", "qwen2", "mimo") or a.o_bias or a.qk_norm or a.sliding_window:
        raise AtlasError(f"{src_dir}: model_type {a.model_type!r} has no faithful MiMo form "
                         "(needs a dense trunk without o_proj bias, q/k norms or sliding windows)")
    if a.attention_bias and a.model_type == "llama":
        raise AtlasError(f"{src_dir}: a Llama with attention_bias has an o_proj bias, which Qwen2 lacks")
    args = dataclasses.replace(a, model_type="qwen2", attention_bias=True, o_bias=False)
    trunk, layer = _qwen2_trunk(ck.trunk, args), _mimo_mtp(ck.mtp, args) if mtp else None
    out = Path(out_dir)
    dtype = _stored_dtype(src_dir)
    checkpoint.save(out, args, trunk, layer, tokenizer_json=ck.tokenizer_path and Path(ck.tokenizer_path),
                    dtype=dtype, layout=layouts.MIMO)
    cfg = json.loads((out / "config.json").read_text())
    cfg["architectures"] = [ARCHITECTURE if mtp else TRUNK_ARCHITECTURE]
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tok = out / "tokenizer"
    tok.mkdir(exist_ok=True)
    (tok / "tokenizer.json").write_bytes((out / "tokenizer.json").read_bytes())
    (tok / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2) + "\n")
    info = {"hash": checkpoint.file_hash([out / "config.json", out / "model.safetensors"]), "source": str(src_dir),
            "source_hash": ck.hash}
    (out / EXPORT_JSON).write_text(json.dumps(info, indent=2) + "\n")   # the folder holding it is the path
    return {"path": str(out), **info}


def exported(src_dir, root, mtp: bool = True) -> dict:
    """`src_dir` exported under `root`/<its hash>[-trunk], written once (atomically: a half-written export
    is never found) and reused while the source's hash is the same."""
    import shutil
    import tempfile
    src_hash = checkpoint.file_hash(_source_files(src_dir))
    out = Path(root) / (src_hash.split(":")[-1][:16] + ("" if mtp else "-trunk"))
    if not (out / EXPORT_JSON).is_file():
        Path(root).mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=root))
        try:
            export(src_dir, tmp, mtp)
            if out.exists():          # an export that never wrote its EXPORT_JSON: incomplete, replaced
                shutil.rmtree(out)
            os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return {**json.loads((out / EXPORT_JSON).read_text()), "path": str(out)}


def _source_files(src_dir) -> list[Path]:
    d = Path(src_dir)
    if not (d / "config.json").is_file():
        raise AtlasError(f"{d}: no config.json (not a checkpoint directory)")
    return sorted(p for p in d.iterdir() if p.suffix in (".json", ".safetensors", ".yaml") and p.is_file())


def _stored_dtype(src_dir) -> torch.dtype:
    """The dtype the source stores (bf16 weights rewritten as bf16 are exact; zeros are exact in any)."""
    cfg = json.loads((Path(src_dir) / "config.json").read_text())
    name = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(name, torch.float32)

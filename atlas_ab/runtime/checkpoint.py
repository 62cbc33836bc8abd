"""Hugging Face checkpoint directories <-> (ModelArgs, Transformer, MTPModule).

A directory holds config.json, model.safetensors (or shards + model.safetensors.index.json) and
optionally tokenizer.json. Safetensors only: nothing is ever unpickled. The MTP module, when
config.json says num_nextn_predict_layers: 1, is found through its layout's key map
(runtime/layouts.py: DeepSeek-V3 under model.layers.{num_hidden_layers}, MiMo under
model.mtp_layers.0, or the checkpoint's own declared map), which also declares the hidden handoff.

Loading builds the modules on the meta device and assigns the file's tensors (no random init),
so a few-M-parameter checkpoint loads in tens of milliseconds.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import torch

from atlas_ab import AtlasError
from atlas_ab.runtime import layouts
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.layouts import MTPLayout
from atlas_ab.runtime.model import MTPModule, Transformer

_INDEX = "model.safetensors.index.json"


@dataclass
class Checkpoint:
    args: ModelArgs
    trunk: Transformer
    mtp: Optional[MTPModule]
    tokenizer_path: Optional[str]
    hash: str                     # "sha256:<hex>" over config.json (+ atlas_mtp.yaml) + the safetensors files
    path: Optional[str] = None
    layout: Optional[MTPLayout] = None   # the MTP layer's key map (None without an MTP)


def mtp_prefix(args: ModelArgs, layout: MTPLayout = layouts.TRAINED_HERE) -> str:
    return layout.prefix_for(args.num_hidden_layers)


def hf_unexpected_patterns(args: ModelArgs, layout: MTPLayout = layouts.TRAINED_HERE) -> list[str]:
    """Regexes for transformers' `_keys_to_ignore_on_load_unexpected`: a subclass of
    XForCausalLM carrying them loads one of our checkpoints without the UNEXPECTED load report
    for the MTP tensors (plain XForCausalLM loads fine too, it just logs the report)."""
    import re
    return ["^" + re.escape(mtp_prefix(args, layout))]


def _one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def _files(d: Path) -> list[Path]:
    idx = d / _INDEX
    if idx.is_file():
        try:
            wm = json.loads(idx.read_text())["weight_map"]
            names = sorted(set(wm.values()))
        except Exception as e:
            raise AtlasError(f"{idx}: unreadable index ({_one_line(e)})") from None
        for n in names:
            if not (d / n).is_file():
                raise AtlasError(f"{d}: shard {n} named in {_INDEX} is missing")
        return [d / n for n in names]
    files = sorted(d.glob("*.safetensors"))
    if not files:
        if any(d.glob("pytorch_model*.bin")) or any(d.glob("*.pt")) or any(d.glob("*.pth")):
            raise AtlasError(f"{d}: only pickle weights (pytorch_model.bin); safetensors is required")
        raise AtlasError(f"{d}: no *.safetensors weights")
    return files


def file_hash(paths) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return "sha256:" + h.hexdigest()


def _read_tensors(files: list[Path], device: str) -> dict[str, torch.Tensor]:
    from safetensors import safe_open
    out: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt", device=device) as sf:
                for k in sf.keys():
                    if k in out:
                        raise AtlasError(f"{f.name}: tensor {k} appears in more than one file")
                    out[k] = sf.get_tensor(k)
        except AtlasError:
            raise
        except Exception as e:
            raise AtlasError(f"{f.name}: corrupt safetensors ({_one_line(e)})") from None
    return out


def _expected(module: torch.nn.Module, prefix: str, skip=()) -> dict[str, torch.Size]:
    return {prefix + k: v.shape for k, v in module.state_dict().items() if k not in skip}


def _mtp_names(layout: MTPLayout, mtp: MTPModule, args: ModelArgs, trunk_names, d: Path) -> dict[str, str]:
    """checkpoint name -> MTPModule name, through the key map (checked one-to-one and apart from the trunk)."""
    names = {layout.checkpoint_name(k, args.num_hidden_layers): k for k in mtp.state_dict()}
    if len(names) != len(mtp.state_dict()):
        raise AtlasError(f"{d}: the MTP key map {layout.name!r} gives two roles the same tensor name")
    clash = sorted(set(names) & set(trunk_names))
    if clash:
        raise AtlasError(f"{d}: the MTP key map {layout.name!r} points at the trunk's tensor {clash[0]}")
    return names


def _drop_embed_copy(tensors: dict, layout: MTPLayout, args: ModelArgs, d: Path) -> None:
    """DeepSeek-V3 stores the MTP's (shared) embedding again under its prefix: it must be the
    trunk's; an MTP layer with an embedding of its own is not something we run."""
    if not layout.embed_copy:
        return
    key = layout.prefix_for(args.num_hidden_layers) + layout.embed_copy + ".weight"
    copy, embed = tensors.pop(key, None), tensors.get("model.embed_tokens.weight")
    if copy is not None and embed is not None and not torch.equal(copy, embed):
        raise AtlasError(f"{d}: {key} differs from model.embed_tokens.weight (an MTP layer with its own "
                         "embedding is not supported)")


def load(path: Union[str, os.PathLike], device="cpu", dtype: torch.dtype = torch.float32) -> Checkpoint:
    d = Path(path)
    if not d.is_dir():
        raise AtlasError(f"checkpoint directory not found: {d}")
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise AtlasError(f"{d}: missing config.json")
    try:
        cfg = json.loads(cfg_path.read_text())
    except Exception as e:
        raise AtlasError(f"{cfg_path}: invalid JSON ({_one_line(e)})") from None
    layouts.refuse_unsupported(cfg, str(d))
    args = ModelArgs.from_hf(cfg)
    files = _files(d)
    digest = file_hash([cfg_path, *layouts.key_map_files(d), *files])

    dev = torch.device(device)
    # straight to the device: safetensors reads each tensor into `device` (no CPU copy on the GPU)
    tensors = _read_tensors(files, "cpu" if dev.type == "meta" else str(dev))
    for k in [k for k in tensors if k.endswith("rotary_emb.inv_freq")]:
        del tensors[k]                          # old HF checkpoints carry this buffer; we recompute it
    if args.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)     # tied: the embedding is the head (HF ignores it too)

    N = args.num_hidden_layers
    layout = layouts.detect(cfg, tensors.keys(), N, d) if args.num_nextn_predict_layers else None
    with torch.device("meta"):
        trunk = Transformer(args)
        mtp = None
        if layout is not None:
            own_head = layout.head is not None and layout.checkpoint_name("shared_head.head.weight", N) in tensors
            mtp = MTPModule(args, own_head=own_head, hidden_first=layout.hidden_first,
                            zero_first_embed=layout.zero_first_embed)
    want = _expected(trunk, "", skip=("lm_head.weight",) if args.tie_word_embeddings else ())
    mtp_names = {}
    if mtp is not None:
        mtp_names = _mtp_names(layout, mtp, args, want, d)
        shapes = mtp.state_dict()
        want.update({k: shapes[m].shape for k, m in mtp_names.items()})
        _drop_embed_copy(tensors, layout, args, d)
    missing = [k for k in want if k not in tensors]
    extra = sorted(k for k in tensors if k not in want)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise AtlasError(f"{d}: missing tensor {missing[0]}{more}"
                         + (f" (MTP layout {layout.name})" if missing[0] in mtp_names else ""))
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise AtlasError(f"{d}: unexpected tensor {extra[0]}{more}")
    for k, shape in want.items():
        if tensors[k].shape != shape:
            raise AtlasError(f"{d}: tensor {k} has shape {tuple(tensors[k].shape)}, expected {tuple(shape)}")
        if not tensors[k].is_floating_point():
            raise AtlasError(f"{d}: tensor {k} has non-float dtype {tensors[k].dtype}")
        tensors[k] = tensors[k].to(dtype)

    trunk.load_state_dict({k: tensors[k] for k in want if k not in mtp_names}, strict=False, assign=True)
    trunk.tie_weights()
    trunk.eval()
    if mtp is not None:
        mtp.load_state_dict({m: tensors[k] for k, m in mtp_names.items()}, strict=True, assign=True)
        mtp.eval()
        mtp.attach(trunk)
    for m in (trunk, mtp):
        if m is not None:
            bad = [n for n, p in m.named_parameters() if p.is_meta]
            if bad and dev.type != "meta":
                raise AtlasError(f"{d}: tensor {bad[0]} was not loaded")
    tok = d / "tokenizer.json"
    return Checkpoint(args, trunk, mtp, str(tok) if tok.is_file() else None, digest, str(d), layout)


def save(path: Union[str, os.PathLike], args: ModelArgs, trunk: Transformer, mtp: Optional[MTPModule] = None,
         tokenizer_json=None, dtype: torch.dtype = torch.bfloat16, layout: MTPLayout = layouts.TRAINED_HERE) -> str:
    """Write config.json + model.safetensors (+ tokenizer.json). Returns the checkpoint hash.

    The trunk is stored under HF names (lm_head.weight omitted when tied), the MTP under its
    layout's names (default: what our trainer builds, DeepSeek-V3 names under model.layers.{N},
    handed the PRE-norm hidden), and config.json declares that key map in full under "atlas_mtp",
    handoff included. transformers' XForCausalLM loads the trunk and reports the MTP tensors as
    unexpected keys (harmless; see tests/runtime/test_checkpoint.py).
    tokenizer_json: None, a JSON string, a dict, a tokenizers.Tokenizer, or a path to a tokenizer.json.
    """
    from safetensors.torch import save_file
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    args = dataclasses.replace(args, num_nextn_predict_layers=1 if mtp is not None else 0)
    stored = lambda v: v.detach().to("cpu", dtype).contiguous()  # noqa: E731
    tensors = {k: stored(v) for k, v in trunk.state_dict().items()
               if not (args.tie_word_embeddings and k == "lm_head.weight")}
    cfg = args.to_hf(dtype=str(dtype).replace("torch.", ""))
    if mtp is not None:
        if (mtp.hidden_first, mtp.zero_first_embed) != (layout.hidden_first, layout.zero_first_embed):
            raise ValueError(f"the MTP module is not wired as layout {layout.name!r} declares")
        N = args.num_hidden_layers
        tensors.update({layout.checkpoint_name(k, N): stored(v) for k, v in mtp.state_dict().items()})
        cfg[layouts.KEY] = layout.declaration()
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})

    if tokenizer_json is not None:
        dst = d / "tokenizer.json"
        if dst.is_symlink():      # a shipped dir's link to another's tokenizer: write this dir its own file
            dst.unlink()
        if isinstance(tokenizer_json, os.PathLike):
            dst.write_bytes(Path(tokenizer_json).read_bytes())
        elif isinstance(tokenizer_json, dict):
            dst.write_text(json.dumps(tokenizer_json, ensure_ascii=False))
        elif isinstance(tokenizer_json, bytes):
            dst.write_bytes(tokenizer_json)
        elif hasattr(tokenizer_json, "to_str"):
            dst.write_text(tokenizer_json.to_str())
        elif isinstance(tokenizer_json, str) and not tokenizer_json.lstrip().startswith("{"):
            dst.write_bytes(Path(tokenizer_json).read_bytes())      # a path given as str
        else:
            dst.write_text(tokenizer_json)
    return file_hash([d / "config.json", d / "model.safetensors"])

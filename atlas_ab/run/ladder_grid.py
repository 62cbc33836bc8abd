"""A ladder study's grid, checked whole by every job before any model loads (conf/study/ladder.yaml).

A family ladder (study.families) is the same grid with a family in place of K: two families or more,
each once, study.family_k in the arm's K range, the job's family one of them; its memory is taken at
family_k (a draft model's or head's own weights are left out of the estimate: small beside the target's).
Refused, in one line each: a K past the proposer's maximum (the arm's num_drafts range), a replicate
count below 1 (or a replicate outside it), a job outside the grid, a width wider than the workload (its
wave would hold fewer documents), and a width the device's memory cannot hold, with the widest that
fits. The memory a width needs is an estimate, stated as such: the weights (trunk and MTP layer)
plus, per sequence, the KV rows of every layer (the MTP layer's too) over the workload's reach, plus
one verify's activations (logits and MLP rows of K + 1 tokens), times HEADROOM for the allocator and
the graphs' pools.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.config.paths import resolve_path
from atlas_ab.config.structured import RANGES

#: The estimate's margin for what it leaves out (allocator fragmentation, CUDA-graph pools, workspaces).
HEADROOM = 1.3
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def architecture(model) -> dict:
    """The shape fields of a model config (init=random) or of its checkpoint's config.json."""
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "intermediate_size", "vocab_size")
    if model.init == "random":
        a = {k: getattr(model, k) for k in keys}
    else:
        cfg = Path(resolve_path(model.path)) / "config.json"
        try:
            a = {k: json.loads(cfg.read_text())[k] for k in keys}
        except (OSError, ValueError, KeyError) as e:
            raise AtlasError(f"{cfg}: cannot read the model's shape for the ladder's memory check ({e})") from None
    a["head_dim"] = a["hidden_size"] // a["num_attention_heads"]
    return a


def bytes_needed(arch: dict, width: int, k: int, reach: int, nbytes: int) -> tuple[int, int]:
    """(weights, per sequence) bytes at K drafts; reach: the positions a sequence's KV holds."""
    H, L, I, V = arch["hidden_size"], arch["num_hidden_layers"], arch["intermediate_size"], arch["vocab_size"]
    kv_dim = arch["num_key_value_heads"] * arch["head_dim"]
    layer = H * (H + 2 * kv_dim) + H * H + 3 * H * I                  # attention + SwiGLU MLP
    weights = (2 * V * H + (L + 1) * layer + 2 * H * H) * nbytes       # embeddings, head, layers, MTP proj
    kv = (L + 1) * 2 * kv_dim * reach * nbytes
    act = (k + 1) * (V * 4 + (3 * I + 4 * H) * nbytes)
    return int(weights), int(kv + act)


def available_bytes(device: str) -> tuple[int, str]:
    """Free bytes of the device the job would run on (auto: the GPU if there is one), and its name."""
    if device != "cpu":
        import torch

        if torch.cuda.is_available():
            dev = torch.device("cuda" if device == "auto" else device)
            # what this process's allocator holds (an earlier job of the sweep) is free to the next job
            free = torch.cuda.mem_get_info(dev)[0] + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
            return int(free), f"{dev} ({torch.cuda.get_device_name(dev)})"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "cpu"
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "cpu"


def check_grid(c, available: tuple[int, str] | None = None) -> None:
    """Refuse a ladder grid (c: session.Configs) that cannot run whole; `available` for tests."""
    s, w, r = c.study, c.workload, c.runner
    where = f"study {s.name!r}"
    k_hi = RANGES["num_drafts"][1]
    if s.families:
        _check_families(c, where)
    elif s.k_max > k_hi:
        raise AtlasError(f"{where}: k_max={s.k_max} is beyond the {c.arm.proposer} proposer's maximum K={k_hi} "
                         "(arm.num_drafts)")
    if s.k_max < 1 or not s.widths or min(s.widths) < 1:
        raise AtlasError(f"{where}: a ladder needs k_max >= 1 and widths >= 1 (got k_max={s.k_max}, "
                         f"widths={list(s.widths)})")
    if s.replicates < 1 or not 0 <= s.replicate < s.replicates:
        raise AtlasError(f"{where}: study.replicates={s.replicates} must be >= 1 and this job's replicate "
                         f"({s.replicate}) one of 0..replicates-1: leave study.replicate to the study's order")
    if r.batch_width not in s.widths or (not s.families and not 0 <= c.arm.num_drafts <= s.k_max):
        raise AtlasError(f"{where}: this job (runner.batch_width={r.batch_width}, arm.num_drafts="
                         f"{c.arm.num_drafts}) is outside the grid (widths {list(s.widths)}, K 0..{s.k_max})")
    if s.waves > 0 and w.n_docs != s.waves * r.batch_width:
        raise AtlasError(f"{where}: study.waves={s.waves} runs workload.n_docs = waves x batch width "
                         f"({s.waves * r.batch_width}), but n_docs={w.n_docs}: leave workload.n_docs to the study")
    if s.waves <= 0 and max(s.widths) > w.n_docs:
        raise AtlasError(f"{where}: batch width {max(s.widths)} is wider than workload.n_docs={w.n_docs} "
                         "(its wave would hold fewer documents): raise n_docs or drop the width")
    dtype = r.dtype if r.dtype != "auto" else ("float32" if available_device(r.device) == "cpu" else "bfloat16")
    arch = architecture(c.model)
    k = s.family_k if s.families else s.k_max
    reach = w.turns * (w.chunk_tokens + w.gen_tokens) + k + 2
    weights, per_seq = bytes_needed(arch, max(s.widths), k, reach, _BYTES.get(dtype, 4))
    free, name = available if available is not None else available_bytes(r.device)
    fits = int((free / HEADROOM - weights) // per_seq) if free / HEADROOM > weights else 0
    if max(s.widths) > fits:
        need = (weights + max(s.widths) * per_seq) * HEADROOM
        raise AtlasError(f"{where}: batch width {max(s.widths)} needs ~{need / 2**30:.1f} GiB on {name} (weights "
                         f"{weights / 2**30:.2f} GiB + {per_seq / 2**20:.1f} MiB per sequence, x{HEADROOM} "
                         f"headroom; an estimate), {free / 2**30:.1f} GiB free: the widest that fits is {fits}")


def _check_families(c, where: str) -> None:
    """A family ladder's own grid: two families or more, each once, K in range, the job's family one of them."""
    s = c.study
    lo, hi = RANGES["num_drafts"]
    if len(s.families) < 2 or len(set(s.families)) < len(s.families):
        raise AtlasError(f"{where}: study.families={list(s.families)} must name two families or more, each once")
    if s.k_max != len(s.families) - 1:
        raise AtlasError(f"{where}: a family ladder's k_max is the last index of study.families "
                         f"({len(s.families) - 1}), got {s.k_max}: leave study.k_max to the study")
    if not lo <= s.family_k <= hi:
        raise AtlasError(f"{where}: study.family_k={s.family_k} is out of range [{lo}, {hi}]")
    if s.family not in s.families:
        raise AtlasError(f"{where}: this job's family {s.family!r} is not in study.families: leave study.family "
                         "to the study's order")


def available_device(device: str) -> str:
    """cpu or cuda: where `runner.device` puts the job (auto: the GPU when there is one)."""
    if device == "cpu":
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"

"""Greedy references an engine's completions are checked against, per request (doc_id, turn).

  ours          our trunk's greedy decoding of the run's workload, fp32 on the CPU
                (speculative/trajectory.greedy: what every live arm of ours commits), with the
                top-1 minus top-2 logit of each argmax
  transformers  transformers' own greedy decoding (`generate`, do_sample=False) of the checkpoint,
                fp32, from each request's prompt ids as the engine received them: code that shares
                nothing with ours or the engine's, with the same margins

A completion that differs from a reference is named with that margin at its first difference:
a near-tie (a margin of a few 1e-6 in fp32) is arithmetic, a large one a bug.
"""
from __future__ import annotations

import json
from pathlib import Path

from atlas_ab import AtlasError

Key = tuple[int, int]          # (doc_id, turn)


def manifest(run: Path) -> dict:
    """A complete run's manifest; one line if it is missing or not complete."""
    p = Path(run) / "manifest.json"
    if not p.is_file():
        raise AtlasError(f"{run}: no manifest.json")
    m = json.loads(p.read_text())
    if m.get("status") != "complete":
        raise AtlasError(f"{run}: status {m.get('status')!r}, a complete run expected")
    return m


def ours(m: dict) -> tuple[dict[Key, list[int]], dict[Key, list[float]]]:
    """Our target's greedy G tokens per request for the run of manifest `m`, and their margins."""
    import torch

    from atlas_ab.config.structured import SamplingConfig, WorkloadConfig
    from atlas_ab.runtime.checkpoint import load
    from atlas_ab.speculative.trajectory import greedy
    from atlas_ab.workload.documents import build_workload
    model = Path(m["model"]["path"])
    cfg = dict(m["config"]["workload"])
    cfg["sampling"] = SamplingConfig(**(cfg.get("sampling") or {}))
    wl = build_workload(WorkloadConfig(**cfg), model / "tokenizer.json")
    if wl.hash != m["workload"]["hash"]:
        raise AtlasError(f"the workload rebuilt here ({wl.hash}) is not the run's ({m['workload']['hash']})")
    trunk = load(model, device="cpu", dtype=torch.float32).trunk.eval()
    traj = greedy(trunk, wl.docs, wl.gen_tokens)
    gen, marg = traj.generated(), traj.turn_margins()
    keys = [(int(d), t) for d in traj.doc_ids for t in range(len(gen[0]))]
    by_b = {int(d): b for b, d in enumerate(traj.doc_ids)}
    return ({k: gen[by_b[k[0]]][k[1]] for k in keys},
            {k: [x[0] for x in marg[by_b[k[0]]][k[1]]] for k in keys})


def transformers_greedy(model_dir, prompts: dict[Key, list[int]], max_new: dict[Key, int]
                        ) -> tuple[dict[Key, list[int]], dict[Key, list[float]]]:
    """transformers' greedy completion of each prompt (fp32, one request at a time) and the
    top-1 minus top-2 logit of each chosen token."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()       # the MTP tensors are reported as unexpected keys: harmless
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    toks, margins = {}, {}
    with torch.no_grad():
        for key in sorted(prompts):
            ids = torch.tensor([prompts[key]])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new[key],
                                 do_sample=False, output_logits=True,
                                 return_dict_in_generate=True, pad_token_id=0)
            toks[key] = out.sequences[0, ids.shape[1]:].tolist()
            top2 = [lg[0].float().topk(2).values for lg in out.logits]
            margins[key] = [float(v[0] - v[1]) for v in top2]
    return toks, margins


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where a and b differ (a length difference counts), None if equal."""
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if i is None and len(a) != len(b):
        i = min(len(a), len(b))
    return i

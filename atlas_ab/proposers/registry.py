"""Drafter families by name: `arm.proposer` picks one, and its builder here makes it from the loaded target.

A family is one module under proposers/ and one `@register` builder below; the runner calls
`build` and never names a family itself. Each builder imports its module lazily, so a run loads
only the family it runs. The names are `config.structured.PROPOSERS` (the config validates an arm
before any of this loads); `tests/run/test_registry.py` keeps the two lists equal.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from atlas_ab.errors import AtlasError

log = logging.getLogger(__name__)


def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters()) if module is not None else 0


@dataclass
class Target:
    """What a builder may read: the loaded checkpoint (its trunk, MTP module, layout), the run's
    model config, its arm, device and dtype."""
    ck: Any
    model: Any         # config.structured.ModelConfig
    arm: Any           # config.structured.ArmConfig
    device: Any
    dtype: Any


@dataclass
class Built:
    proposer: Any                 # a proposers.base.DraftProposer
    #: what the run's manifest records of this drafter (model.handoff, model.draft)
    manifest: dict = field(default_factory=dict)


BUILDERS: dict[str, Callable[[Target], Built]] = {}


def register(name: str):
    def add(fn: Callable[[Target], Built]):
        BUILDERS[name] = fn
        return fn
    return add


def build(target: Target) -> Built:
    fn = BUILDERS.get(target.arm.proposer)
    if fn is None:   # the config refuses an unknown family first; this is a family without a builder
        raise AtlasError(f"arm proposer={target.arm.proposer!r}: no builder registered "
                         f"(families: {', '.join(sorted(BUILDERS))})")
    return fn(target)


@register("mtp")
def _mtp(t: Target) -> Built:
    from atlas_ab.proposers.mtp_head import MTPProposer
    from atlas_ab.runtime.layouts import handoff_in_effect

    ck = t.ck
    if ck.mtp is None:
        raise AtlasError(f"{ck.path}: the checkpoint has no MTP module (num_nextn_predict_layers = 0)")
    # HANDOFF_NORM / RECYCLE_NORM: the checkpoint's declaration unless the arm overrides it
    handoff = handoff_in_effect(ck.layout, t.arm.handoff_norm, t.arm.recycle_norm)
    log.info("MTP layout %s: declared handoff_norm=%s recycle_norm=%s (%s); running %s", ck.layout.name,
             ck.layout.handoff_norm, ck.layout.recycle_norm, ck.layout.source, handoff["in_effect"])
    prop = MTPProposer(ck.trunk.eval(), ck.mtp.eval(), t.arm.row_space, t.arm.refeed, **handoff["in_effect"],
                       head_fp8=t.arm.head_fp8, kv_fp8=t.arm.kv_fp8, head_shards=t.arm.head_shards,
                       prefill_full=t.arm.prefill_full, drafter_skip=t.arm.drafter_skip)
    numerics = prop.numerics()      # HEAD_FP8 / KV_FP8 / HEAD_SHARDS as they run (None: all off)
    if numerics and "emulated" in numerics.get("head_fp8", ""):
        log.warning("HEAD_FP8: %s", numerics["head_fp8"])
    return Built(prop, {"handoff": handoff, **({"drafter_numerics": numerics} if numerics else {})})


@register("draft_model")
def _draft_model(t: Target) -> Built:
    from atlas_ab.config.paths import resolve_path
    from atlas_ab.proposers.draft_model import DraftModelProposer
    from atlas_ab.runtime import checkpoint

    if not t.model.draft_path:
        raise AtlasError("arm proposer=draft_model needs model.draft_path")
    draft = resolve_path(t.model.draft_path)
    dck = checkpoint.load(draft, t.device, t.dtype)
    info = {"path": draft, "hash": dck.hash, "architecture": dck.args.as_dict(), "params": n_params(dck.trunk)}
    return Built(DraftModelProposer(dck.trunk.eval()), {"draft": info})


@register("eagle3")
def _eagle3(t: Target) -> Built:
    from atlas_ab.config.paths import resolve_path
    from atlas_ab.proposers.eagle3 import EAGLE3Proposer
    from atlas_ab.runtime import eagle3_checkpoint

    if not t.model.eagle3_path:
        raise AtlasError("arm proposer=eagle3 needs model.eagle3_path")
    path = resolve_path(t.model.eagle3_path)
    if t.ck.path:                 # (a random-weight target has no directory: its shape is checked below)
        eagle3_checkpoint.check_layers(path, t.ck.path)
    head, digest = eagle3_checkpoint.load(path, t.device, t.dtype)
    n = t.ck.args.num_hidden_layers
    bad = [i for i in head.layers if not 0 <= i <= n]
    if bad or head.target_hidden_size != t.ck.args.hidden_size:
        raise AtlasError(f"{path}: EAGLE-3 feature layers {list(head.layers)} (target_hidden_size "
                         f"{head.target_hidden_size}) do not fit the target ({n} layers, hidden "
                         f"{t.ck.args.hidden_size})")
    info = {"path": path, "hash": digest, "feature_layers": list(head.layers), "params": n_params(head)}
    return Built(EAGLE3Proposer(t.ck.trunk.eval(), head, t.arm.row_space, t.arm.refeed), {"draft": info})


@register("ngram")
def _ngram(t: Target) -> Built:
    from atlas_ab.config.engine_specs import lookup_bounds
    from atlas_ab.proposers.ngram import NgramProposer

    lo, hi = lookup_bounds(t.arm.prompt_lookup_min, t.arm.prompt_lookup_max)
    return Built(NgramProposer(lo, hi), {"ngram": {"prompt_lookup_min": lo, "prompt_lookup_max": hi}})


@register("suffix")
def _suffix(t: Target) -> Built:
    from atlas_ab.config.engine_specs import suffix_levers
    from atlas_ab.proposers.suffix import SuffixProposer

    levers = suffix_levers(t.arm)
    return Built(SuffixProposer(*(levers[k] for k in ("suffix_decoding_max_tree_depth",
                                                      "suffix_decoding_max_spec_factor",
                                                      "suffix_decoding_min_token_prob",
                                                      "suffix_decoding_max_cached_requests"))),
                 {"suffix": levers})

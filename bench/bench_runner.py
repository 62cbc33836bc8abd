"""Runner throughput, in one process and one run (issue: speed).

    python bench/bench_runner.py [--smoke] [--json OUT]

Prints one JSON object (also written to --json) and a readable table:
  - verify steps/s (rows: one per sequence per verify) for the default model and
    the GPU preset at batch widths 1/16/64/256 and K 1/2/3;
  - the bare ceiling: the same target's plain forward over B x (K+1) tokens at
    the same KV length, captured in a CUDA graph; ratio = runner step / bare;
  - FINGERPRINTS on vs off and SHADOW_TOPK on vs off: throughput ratios;
  - transformers' assisted generation (batch 1, greedy) on the same target and
    draft pair vs our draft-model proposer: committed tokens/s, same text;
  - peak GPU memory per sequence slot;
  - wall time of 10,000 verify steps of one arm (default model, load excluded).
Ratios are taken within this one run. `--smoke` shrinks everything for CI on CPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np
import torch

from atlas_ab.analysis.metrics import cell_counts, rates
from atlas_ab.config.paths import resolve_path
from atlas_ab.config.structured import ArmConfig, ModelConfig, WorkloadConfig
from atlas_ab.proposers.draft_model import DraftModelProposer
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.run.runner import DEFAULT_TOKENIZER
from atlas_ab.runtime import checkpoint
from atlas_ab.runtime.fusion import compile_seconds
from atlas_ab.runtime.graphs import capture_seconds
from atlas_ab.runtime.kernels.top1 import argmax, top1
from atlas_ab.runtime.presets import random_checkpoint
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.run_ahead import RunAhead
from atlas_ab.speculative.step_events import Fingerprints
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.telemetry.fingerprint import fingerprint_rows
from atlas_ab.workload.documents import build_workload

from common import graphed_ms, sync  # bench/common.py (this folder is on sys.path)
from goals import RATED_BYTES_PER_S, runner_goals, step_limit_ms, table as goals_table  # bench/goals.py

GRAPHS = torch.cuda.is_available()    # the runner's default on a GPU
DEFAULT = "atlas_ab/models/default"
DRAFT = "atlas_ab/models/draft"


def load_models(name, dev, dtype):
    """default: the shipped checkpoint; gpu / llama1b / llama8b: the random-weight presets of
    conf/model/ (the same shapes the runner's model=... builds)."""
    if name == "default":
        return checkpoint.load(Path(resolve_path(DEFAULT)), dev, dtype)
    import yaml

    from atlas_ab.config.paths import CONF_DIR
    cfg = ModelConfig(**yaml.safe_load((CONF_DIR / "model" / f"{name}.yaml").read_text()))
    return random_checkpoint(cfg, DEFAULT_TOKENIZER, dev, dtype)


def docs_for(n, turns, chunk, gen):
    return build_workload(WorkloadConfig(n_docs=n, turns=turns, chunk_tokens=chunk, gen_tokens=gen),
                          DEFAULT_TOKENIZER).docs


def run_wave(trunk, proposer, arm, docs, gen, target=None, run_ahead=True, host_events=False, capacity=None):
    """One wave; `target` (with the same proposer) kept across calls keeps its step graphs, as the
    runner keeps them across a run's waves. run_ahead: False, every step waits for the host's plan.
    host_events: a run-ahead's fingerprint events recorded by the host step by step, as before they
    were laid out on the device (FINGERPRINTS' mode "laid_out"; for the comparison). capacity: every sequence's token
    budget (the runner's one per run, so that waves share their step graphs)."""
    dev = next(trunk.parameters()).device
    sync(dev)
    t0 = time.perf_counter()
    fp = fingerprint_rows if arm.fingerprints_on else None
    target = target if target is not None else LiveTarget(trunk, GRAPHS)
    wave = Wave(target, proposer, arm, docs, gen, fingerprint_rows=fp, run_ahead=run_ahead, capacity=capacity)
    if host_events and isinstance(wave.probe, Fingerprints) and wave.probe.laid_out:
        wave.probe.mode = "in_step"
    trace = wave.run()
    sync(dev)
    t1 = time.perf_counter()
    if trace.events is not None:
        trace.events.table()            # the fingerprints' hashing and one copy back, part of the cost
    sync(dev)
    wall = time.perf_counter() - t0
    events_s = time.perf_counter() - t1 if trace.events is not None else 0.0
    steps = trace.steps.table().to_pandas()
    r = rates(cell_counts(steps, arm.name, K=arm.num_drafts))    # the analysis' own definitions
    batched = steps.groupby(["turn", "step"]).ngroups
    return dict(wall_s=wall, events_table_s=events_s, rows=len(steps), batched_steps=batched, tokens=trace.n_tokens,
                rows_per_s=len(steps) / wall, tokens_per_s=trace.n_tokens / wall,
                step_ms_median=float(steps.step_ms.median()),
                **{m: float(r[m]) for m in ("p1", "tokens_per_step")},
                mean_position=float(steps.position.mean())), trace


class HostSplit:
    """Where the host's part of a step goes: wall time inside the loop's named parts (Wave._plan,
    _run: the plan's copy in and the graph's launch, _commit, _flush: the last step's telemetry,
    Fingerprints.propose_and_feed: FINGERPRINTS' metadata) and the rest of `_step` (the read, which
    waits for the device, and the step's own bookkeeping), summed over a wave's steps. Under
    run-ahead the root is `Wave._run_ahead` and its parts `RunAhead.launch` (the chunk's graph
    launches), `RunAhead.book_chunk` (the host's plan, check and commit of a chunk, while the device
    runs the next) and `Wave._emit` (telemetry); the rest is the read. Patches them while active."""
    ROOTS = ((Wave, "_step"), (Wave, "_run_ahead"))
    STEP_PARTS = ((Wave, "_plan"), (Wave, "_run"), (Wave, "_commit"), (Wave, "_flush"),
                  (Fingerprints, "propose_and_feed"))
    PARTS = STEP_PARTS + ((RunAhead, "launch"), (RunAhead, "book_chunk"), (Wave, "_emit"))

    def __enter__(self):
        self.spent = {name: 0.0 for _, name in self.PARTS + self.ROOTS}
        self.waited = 0.0            # run-ahead: the host's waits for a step's read (inside `book_chunk`)
        if torch.cuda.is_available():
            self.event_sync = torch.cuda.Event.synchronize

            def timed_sync(event, _sync=self.event_sync):
                t0 = time.perf_counter()
                try:
                    return _sync(event)
                finally:
                    self.waited += time.perf_counter() - t0
            torch.cuda.Event.synchronize = timed_sync
        self.saved = {(owner, name): getattr(owner, name) for owner, name in self.PARTS + self.ROOTS}
        self.stack: list[str] = []
        for (owner, name), fn in self.saved.items():
            setattr(owner, name, self._timed(name, fn))
        return self

    def _timed(self, name, fn):
        """Counted only as _step itself or as a part called by it directly (no double counting of a
        part inside another, nor of a part called outside the steps, as _flush at a turn's end)."""
        def wrapper(*args, **kw):
            roots = [r for _, r in self.ROOTS]
            counted = (name in roots) if not self.stack else (len(self.stack) == 1 and self.stack[0] in roots)
            self.stack.append(name)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self.stack.pop()
                if counted:
                    self.spent[name] += time.perf_counter() - t0
        return wrapper

    def __exit__(self, *exc):
        for (owner, name), fn in self.saved.items():
            setattr(owner, name, fn)
        if torch.cuda.is_available():
            torch.cuda.Event.synchronize = self.event_sync

    def per_step_ms(self, steps: int) -> dict:
        """ms per batched step; `read_and_rest`: _step minus its timed parts."""
        inner = sum(self.spent[p] for _, p in self.PARTS)
        root = sum(self.spent[r] for _, r in self.ROOTS)
        # the step-by-step loop's parts always, the run-ahead's where it ran
        out = {p.lstrip("_"): self.spent[p] * 1e3 / steps for o, p in self.PARTS
               if (o, p) in self.STEP_PARTS or self.spent[p]}
        out["read_and_rest"] = (root - inner) * 1e3 / steps
        if self.waited:
            out["book_chunk_waits"] = self.waited * 1e3 / steps      # part of `book_chunk`: the host idle
        out["step"] = root * 1e3 / steps
        return out


def profile_wave(trunk, mtp, arm, docs, gen, top=12):
    """Where a step's time goes, in steady state: one target and proposer serve a warm-up wave (it
    captures the step graphs), a profiled wave (torch.profiler: the device's kernel time per step,
    the host's biggest ops) and a wave timed by HostSplit (the host's part by loop stage), as a
    run's waves share them. Prefills and the turns' drafter work are in the per-step averages too."""
    from torch.profiler import ProfilerActivity, profile
    target, proposer = LiveTarget(trunk, GRAPHS), MTPProposer(trunk, mtp, arm.row_space, arm.refeed)
    run_wave(trunk, proposer, arm, docs, gen, target=target)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        r, _ = run_wave(trunk, proposer, arm, docs, gen, target=target)
    ev = prof.key_averages()
    steps = r["batched_steps"]
    device_us = sum(e.self_device_time_total for e in ev if e.device_type == torch.autograd.DeviceType.CUDA) \
        if hasattr(ev[0], "self_device_time_total") else sum(e.self_cuda_time_total for e in ev)
    host = sorted(ev, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    dev_t = (lambda e: e.self_device_time_total) if hasattr(ev[0], "self_device_time_total") \
        else (lambda e: e.self_cuda_time_total)
    kernels = sorted((e for e in ev if dev_t(e) > 0), key=dev_t, reverse=True)[:top]
    with HostSplit() as split:
        r2, _ = run_wave(trunk, proposer, arm, docs, gen, target=target)
    return dict(step_ms_median=r["step_ms_median"], wall_ms_per_step=r["wall_s"] * 1e3 / steps,
                device_ms_per_step=device_us / 1e3 / steps, batched_steps=steps,
                host_top=[dict(op=e.key, calls_per_step=e.count / steps,
                               self_cpu_ms_per_step=e.self_cpu_time_total / 1e3 / steps) for e in host],
                device_top=[dict(kernel=e.key[:90], calls_per_step=e.count / steps,
                                 device_ms_per_step=dev_t(e) / 1e3 / steps) for e in kernels],
                unprofiled_step_ms_median=r2["step_ms_median"], events_table_ms=r2["events_table_s"] * 1e3,
                host_split_ms_per_step=split.per_step_ms(r2["batched_steps"]))


def bare_forward(trunk, B, K, kv_len, dev):
    """The target's plain forward over B x (K+1) new tokens at KV length kv_len and its argmax, as
    the verify computes them: a function to time (`bare_forward_ms`) or profile."""
    kv = trunk.new_kv([kv_len + K + 2] * B)
    tok = torch.randint(0, trunk.args.vocab_size, (B, K + 1), device=dev)
    pos = (kv_len + torch.arange(K + 1, device=dev)).expand(B, K + 1).contiguous()
    return lambda: argmax(trunk.logits(trunk.forward(tok, pos, pos, kv, length=kv_len + K + 1), fp32=False))


def bare_forward_ms(trunk, B, K, kv_len, dev, reps):
    """`bare_forward`, replayed from a CUDA graph on the GPU (eager on CPU)."""
    return graphed_ms(bare_forward(trunk, B, K, kv_len, dev), dev, reps)


def step_bytes(trunk, mtp, B, K, kv_len) -> dict:
    """The bytes a step must read at least: the trunk's weights (the verify), the drafter's per draft
    (its own layers and the trunk's lm_head it shares; the embedding rows it gathers are left out), and
    the KV: the verify's over kv_len + K + 1 slots in every trunk layer, each draft's over kv_len in the
    drafter's one layer."""
    a = trunk.args
    params = {id(p): p for p in trunk.parameters()}
    trunk_b = sum(p.numel() * p.element_size() for p in params.values())
    own = [p for p in mtp.parameters() if id(p) not in params]
    drafter_b = sum(p.numel() * p.element_size() for p in own) + trunk.lm_head.weight.numel() \
        * trunk.lm_head.weight.element_size()
    slot = 2 * a.num_key_value_heads * a.head_dim * next(trunk.parameters()).element_size()   # K and V, one layer
    kv_b = B * slot * (a.num_hidden_layers * (kv_len + K + 1) + K * kv_len)
    return dict(trunk_weight_bytes=trunk_b, drafter_weight_bytes=drafter_b, kv_read_bytes=kv_b)


def bare_draft(trunk, mtp, B, kv_len, dev):
    """One MTP draft step (block + head + its top-1 and softmax prob, as `head_outputs`) over B
    rows at drafter length kv_len: what each of a propose's K drafts costs at least (a function)."""
    kv = mtp.new_kv([kv_len + 4] * B)
    H = trunk.args.hidden_size
    tok = torch.randint(0, trunk.args.vocab_size, (B, 1), device=dev)
    hid = torch.randn(B, 1, H, device=dev, dtype=next(trunk.parameters()).dtype)
    pos = torch.full((B, 1), kv_len, device=dev)

    def f():
        out = mtp.forward(tok, hid, pos, pos, kv, trunk.embed_tokens, length=kv_len + 1)
        return top1(mtp.logits(out, trunk.lm_head, fp32=False)[:, 0])
    return f


def bare_draft_ms(trunk, mtp, B, kv_len, dev, reps):
    """`bare_draft`, graphed on the GPU."""
    return graphed_ms(bare_draft(trunk, mtp, B, kv_len, dev), dev, reps)


def hf_assisted(dev, dtype, prompts, gen, K):
    """transformers' assisted generation (batch 1, greedy) on the shipped pair."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()    # the MTP tensors are "unexpected" to LlamaForCausalLM, by design
    tgt = AutoModelForCausalLM.from_pretrained(str(Path(resolve_path(DEFAULT))), dtype=dtype).to(dev).eval()
    dft = AutoModelForCausalLM.from_pretrained(str(Path(resolve_path(DRAFT))), dtype=dtype).to(dev).eval()
    dft.generation_config.num_assistant_tokens = K
    dft.generation_config.num_assistant_tokens_schedule = "constant"
    outs, n_new = [], 0
    with torch.no_grad():
        ids = torch.tensor([prompts[0]], device=dev)
        tgt.generate(ids, assistant_model=dft, do_sample=False, max_new_tokens=4)   # warm-up
        sync(dev)
        t0 = time.perf_counter()
        for p in prompts:
            ids = torch.tensor([p], device=dev)
            o = tgt.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=dft, do_sample=False,
                             max_new_tokens=gen, min_new_tokens=gen)
            new = o[0, len(p):].tolist()
            outs.append(new)
            n_new += len(new)
        sync(dev)
    wall = time.perf_counter() - t0
    return dict(tokens=n_new, wall_s=wall, tokens_per_s=n_new / wall), outs


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run for CI (not timed)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--models", default="default,gpu")
    ap.add_argument("--widths", default=None, help="batch widths (default 1,16,64,256)")
    ap.add_argument("--only-grid", action="store_true", help="the steps/s grid only (no lever ratios, peer, 10k)")
    ap.add_argument("--only-fingerprints", action="store_true",
                    help="the FINGERPRINTS goal's figure alone (default model, the widest width): no grid, no other "
                         "levers")
    ap.add_argument("--fp-alternations", type=int, default=11,
                    help="alternations of the FINGERPRINTS goal's figure (>= 5; 11 narrow its median's interval to "
                         "the 3rd..9th, 93%%, where 5 give min..max: bench/goals.py)")
    ap.add_argument("--reps", type=int, default=5, help="alternations of the three loops per grid cell (median)")
    ap.add_argument("--grid-arm", choices=("plain", "refeed"), default="plain",
                    help="the grid's arm: every lever off (the goals'), or CATCHUP + REFEED (fingerprints on, as the "
                         "main job's arm)")
    ap.add_argument("--profile", default=None, metavar="B,K[,refeed]",
                    help="also profile one wave per model at this batch width and K (where a step's time goes); "
                         "refeed: the arm with CATCHUP and REFEED instead of the plain one")
    a = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    smoke = a.smoke
    if smoke:
        a.reps = 1
    if smoke and not a.profile:       # the CI smoke runs the profile too (and HostSplit), so it cannot rot
        a.profile = "2,2,refeed"
    widths = [1, 2] if smoke else [int(w) for w in (a.widths or "1,16,64,256").split(",")]
    ks = [1, 2] if smoke else [1, 2, 3]
    turns, chunk, gen = (1, 16, 6) if smoke else (2, 64, 32)
    out = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "dtype": str(dtype).replace("torch.", ""), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d"), "smoke": smoke, "grid": [], "levers": {}}
    models = a.models.split(",") if not (smoke or a.only_fingerprints) else ["default"]
    docs_all = docs_for(max(widths), turns, chunk, gen)
    for name in models:
        ck = load_models(name, dev, dtype)
        trunk, mtp = ck.trunk.eval(), ck.mtp.eval()
        # warm-up (kernels, allocator, cuBLAS handles) outside the numbers
        run_wave(trunk, MTPProposer(trunk, mtp, "compact", False), ArmConfig(num_drafts=2), docs_all[:4], 4)
        for B in ([] if a.only_fingerprints else widths):
            for K in ks:
                arm = ArmConfig(name=f"k{K}" + ("_refeed" if a.grid_arm == "refeed" else ""), num_drafts=K,
                                catchup=a.grid_arm == "refeed", refeed=a.grid_arm == "refeed")
                # the same wave step by step (each step waits for the host's plan), run ahead, and run
                # ahead with the bookkeeping eager (runtime/fusion.py off), each mode on its own target and
                # proposer kept across its waves (as a run keeps its graphs), after a warm-up wave of
                # each, alternated `reps` times: the medians of the waves' medians
                modes = (0, 1, 2)
                kept = {m: (LiveTarget(trunk, GRAPHS, fuse=m != 2), MTPProposer(trunk, mtp, "compact", arm.refeed))
                        for m in modes}
                waves = {m: [] for m in modes}
                for rep in range(a.reps + 1):
                    for m in modes:
                        w, _ = run_wave(trunk, kept[m][1], arm, docs_all[:B], gen, target=kept[m][0],
                                        run_ahead=m != 0)
                        if rep:
                            waves[m].append(w)
                stepwise, r = waves[0][-1], dict(waves[1][-1])
                step_ms = {m: [w["step_ms_median"] for w in waves[m]] for m in modes}
                r["step_ms_median"], stepwise = median(step_ms[1]), dict(stepwise, step_ms_median=median(step_ms[0]))
                r.update(step_ms_medians=step_ms[1], stepwise_step_ms_medians=step_ms[0], alternations=a.reps,
                         unfused_step_ms_medians=step_ms[2], unfused_step_ms_median=median(step_ms[2]),
                         grid_arm=a.grid_arm)
                kv_len = int(r["mean_position"])
                reps = 5 if smoke else 50
                bare = bare_forward_ms(trunk, B, K, kv_len, dev, reps)
                draft = bare_draft_ms(trunk, mtp, B, kv_len, dev, reps)
                # where the step's time goes: the verify, K draft steps, and the rest
                # (eager glue between graphs: index copies, acceptance, the host read)
                # floor: the step can be no faster than its verify and its K drafts
                r.update(model=name, B=B, K=K, bare_forward_ms=bare, draft_step_ms=draft,
                         glue_ms=r["step_ms_median"] - bare - K * draft,
                         step_over_bare=r["step_ms_median"] / bare, floor_over_bare=(bare + K * draft) / bare,
                         stepwise_step_ms_median=stepwise["step_ms_median"],
                         stepwise_over_bare=stepwise["step_ms_median"] / bare,
                         unfused_over_bare=r["unfused_step_ms_median"] / bare,
                         wall_stepwise_over_ahead=stepwise["wall_s"] / r["wall_s"])
                rated = RATED_BYTES_PER_S.get(out["device"])
                nbytes = step_bytes(trunk, mtp, B, K, kv_len)
                limit = step_limit_ms(nbytes["trunk_weight_bytes"], nbytes["drafter_weight_bytes"],
                                      nbytes["kv_read_bytes"], K, rated) if rated else None
                r.update(nbytes, rated_bytes_per_s=rated, limit_ms=limit,
                         step_over_limit=r["step_ms_median"] / limit if limit else None)
                out["grid"].append(r)
                print(f"{name:8s} {arm.name:9s} B={B:4d} K={K} rows/s={r['rows_per_s']:10.0f} "
                      f"step={r['step_ms_median']:7.2f}ms "
                      f"bare={bare:6.3f}ms x{r['step_over_bare']:5.2f} (stepwise x{r['stepwise_over_bare']:5.2f}, "
                      f"unfused x{r['unfused_over_bare']:5.2f}, "
                      f"floor x{r['floor_over_bare']:4.2f}) "
                      f"draft={draft:6.3f}ms glue={r['glue_ms']:6.3f}ms "
                      + (f"limit={limit:6.3f}ms x{r['step_over_limit']:5.2f} " if limit else "") +
                      f"p1={r['p1']:.3f}", file=sys.stderr)
        if a.profile and not a.only_fingerprints:
            Bp, Kp, *lever = a.profile.split(",")
            Bp, Kp, refeed = int(Bp), int(Kp), lever == ["refeed"]
            arm = ArmConfig(name=f"k{Kp}" + ("_refeed" if refeed else ""), num_drafts=Kp, catchup=refeed, refeed=refeed)
            prof = profile_wave(trunk, mtp, arm, docs_all[:Bp], gen)
            out.setdefault("profile", {})[name] = dict(B=Bp, K=Kp, arm=arm.name, **prof)
            print(f"{name} profile {arm.name} B={Bp} K={Kp}: step {prof['step_ms_median']:.3f} ms, device "
                  f"{prof['device_ms_per_step']:.3f} ms/step; host top ops:", file=sys.stderr)
            for h in prof["host_top"]:
                print(f"   {h['self_cpu_ms_per_step']:7.3f} ms/step {h['calls_per_step']:6.1f} calls  {h['op']}",
                      file=sys.stderr)
            print("   device top kernels:", file=sys.stderr)
            for k in prof["device_top"]:
                print(f"   {k['device_ms_per_step']:7.3f} ms/step {k['calls_per_step']:6.1f} calls  {k['kernel']}",
                      file=sys.stderr)
            print("   host by loop stage, ms/step (unprofiled wave): " + ", ".join(
                f"{k} {v:.3f}" for k, v in prof["host_split_ms_per_step"].items()), file=sys.stderr)
        if a.json:        # what is measured so far, in case a later model runs past the caller's timeout
            Path(a.json).write_text(json.dumps(out, indent=1))
        if name != "default" or a.only_grid:
            continue
        Bl = widths[-1] if smoke else 64
        docs = docs_all[:Bl]

        def ratio(on_arm, off_arm, reps=2 if smoke else 5, trunk=trunk, mtp=mtp, docs=docs, run_ahead=True,
                  host_events=False):
            """Throughput with a lever on / off at the widest batch, each arm on its own target and
            proposer kept across its waves (as a run keeps its step graphs), after a warm-up wave of
            each (Triton's JIT, the graph captures), alternating so drift hits both alike; medians
            of `reps` runs (one run is ~0.3 s on the GPU: noisy alone)."""
            wide = docs_all[:widths[-1]]
            kept = {key: (LiveTarget(trunk, GRAPHS), MTPProposer(trunk, mtp, arm.row_space, arm.refeed))
                    for key, arm in (("on", on_arm), ("off", off_arm))}
            for key, arm in (("on", on_arm), ("off", off_arm)):
                run_wave(trunk, kept[key][1], arm, wide, gen, target=kept[key][0], run_ahead=run_ahead,
                         host_events=host_events)
            rates, step_ms, events_s = {"on": [], "off": []}, {"on": [], "off": []}, []
            for _ in range(reps):
                for key, arm in (("off", off_arm), ("on", on_arm)):
                    r = run_wave(trunk, kept[key][1], arm, wide, gen, target=kept[key][0], run_ahead=run_ahead,
                                 host_events=host_events)[0]
                    rates[key].append(r["rows_per_s"])
                    step_ms[key].append(r["step_ms_median"])
                    if key == "on":
                        events_s.append(r["events_table_s"])
            on, off = np.median(rates["on"]), np.median(rates["off"])
            # each alternation is one run of the comparison: its own on/off ratio
            pairs = [a_ / b_ for a_, b_ in zip(rates["on"], rates["off"])]
            # where the cost is: inside each step (extra gathers and copies) vs the
            # wave-end hashing of every row (events.table())
            return dict(on_rows_per_s=on, off_rows_per_s=off, throughput_ratio=on / off, run_ahead=run_ahead,
                        batch_width=len(wide), runs=rates, run_ratios=pairs,
                        step_ms_median_on=float(np.median(step_ms["on"])),
                        step_ms_median_off=float(np.median(step_ms["off"])),
                        events_table_s_median=float(np.median(events_s)))

        # the FINGERPRINTS goal is judged on its alternations' median and that median's interval
        # (bench/goals.py); five alternations each of the same with both arms step by step (the loop before
        # run-ahead) and run ahead with the events recorded by the host step by step (what laying them out
        # on the device saves), for the comparison in one run
        variants = (("fingerprints", True, False, max(5, a.fp_alternations)),
                    ("fingerprints_step_by_step", False, False, 5), ("fingerprints_host_events", True, True, 5))
        for key, ahead, host, n in variants[:1] if a.only_fingerprints else variants:
            out["levers"][key] = ratio(ArmConfig(catchup=True, refeed=True, fingerprints=True),
                                       ArmConfig(catchup=True, refeed=True, fingerprints=False),
                                       reps=2 if smoke else n, run_ahead=ahead, host_events=host)
        if a.only_fingerprints:
            continue
        out["levers"]["shadow_topk_4"] = ratio(ArmConfig(shadow_topk=4), ArmConfig())
        # 10,000 verify steps of one arm, load excluded: one target and proposer across the waves, every
        # wave at the run's one token budget, as the runner keeps its KV pool and step graphs (the first
        # wave captures them, inside the figure, as in a run)
        big = docs_for(16 if smoke else 512, 1 if smoke else 3, chunk, gen)
        Bb = len(big) if smoke else 256
        arm = ArmConfig(name="refeed_on", catchup=True, refeed=True)
        kept = (LiveTarget(trunk, GRAPHS), MTPProposer(trunk, mtp, "compact", True))
        capacity = max(sum(len(c) for c in d.chunks) for d in big) + len(big[0].chunks) * gen + arm.num_drafts + 2
        rows = wall = 0
        waves_s, cc0 = [], (compile_seconds(), capture_seconds())
        for i in range(0, len(big), Bb):
            r, _ = run_wave(trunk, kept[1], arm, big[i:i + Bb], gen, target=kept[0], capacity=capacity)
            rows += r["rows"]
            wall += r["wall_s"]
            waves_s.append(r["wall_s"])
            if rows >= 10_000:
                break
        out["ten_k"] = dict(rows=rows, wall_s=wall, seconds_per_10k=wall * 10_000 / rows, batch_width=Bb,
                            waves_s=waves_s, compile_s=compile_seconds() - cc0[0],
                            capture_s=capture_seconds() - cc0[1])     # capture_s includes compile_s
        print(f"10,000 verify steps: {out['ten_k']['seconds_per_10k']:.3f} s ({len(waves_s)} waves of {Bb}: "
              + ", ".join(f"{w:.3f}" for w in waves_s) + f" s; compile {out['ten_k']['compile_s']:.3f} s, "
              f"capture {out['ten_k']['capture_s']:.3f} s inside)", file=sys.stderr)
        # memory per sequence slot
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
            base = torch.cuda.memory_allocated(dev)
            r, _ = run_wave(trunk, MTPProposer(trunk, mtp, "compact", False), ArmConfig(), docs, gen)
            peak = torch.cuda.max_memory_allocated(dev) - base
            out["memory"] = dict(batch_width=Bl, peak_bytes=peak, bytes_per_slot=peak / Bl,
                                 tokens_per_slot=turns * (chunk + gen) + 4)
        # the peer: transformers' assisted generation on the same pair
        if Path(resolve_path(DRAFT)).exists():
            dck = checkpoint.load(Path(resolve_path(DRAFT)), dev, dtype)
            K = 3
            n_prompts = 2 if smoke else 8
            # ours at our widest batch (assisted generation is limited to batch 1)
            Bp = widths[-1]
            dm = ArmConfig(proposer="draft_model", num_drafts=K)
            run_wave(trunk, DraftModelProposer(dck.trunk.eval()), dm, docs_all[:8], 4)     # warm-up
            ours, trace = run_wave(trunk, DraftModelProposer(dck.trunk.eval()), dm, docs_all[:Bp], gen)
            hf, hf_out = hf_assisted(dev, dtype, [d.chunks[0] for d in docs_all[:n_prompts]], gen, K)
            same = sum(int(trace.generated[i][0] == hf_out[i]) for i in range(n_prompts))
            out["peer"] = dict(ours_tokens_per_s=ours["tokens_per_s"], ours_batch_width=Bp,
                               hf_assisted_tokens_per_s=hf["tokens_per_s"],
                               speedup=ours["tokens_per_s"] / hf["tokens_per_s"],
                               same_text=f"{same}/{n_prompts}", K=K, gen_tokens=gen)
    out["goals"] = [g.as_dict() for g in runner_goals(out["grid"], out["levers"])]
    print(json.dumps(out, indent=1))
    print(goals_table(runner_goals(out["grid"], out["levers"])), file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Config -> runtime -> proposer -> waves of the speculative loop.

The runner never imports the analysis. A run is a sequence of waves of
`batch_width` documents; a wave is also the unit of a telemetry shard and of
resume, since the loop is deterministic given the config.

`runner.mode=replay`: the workload's target-only greedy trajectory is built once
(or found in `runner.trajectories`) when the runner starts, and each wave runs
only the drafter's state machine over it (targets.ReplayTarget); the first
`replay_check_waves` waves also run live, and the shard records how the two
differ (replay_check.py). Live mode is unchanged.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

from atlas_ab import AtlasError
from atlas_ab.config.paths import PACKAGE_DIR, resolve_path
from atlas_ab.config.structured import (
    ArmConfig,
    ModelConfig,
    RunnerConfig,
    WorkloadConfig,
    fuse_for,
    gate_sequences_for,
    steps_bound,
    timing_only,
    validate_run,
)
from atlas_ab.proposers.capabilities import require
from atlas_ab.proposers.registry import n_params
from atlas_ab.run.engine import RunInfo, WaveResult
from atlas_ab.run.store import aggregate_gate
from atlas_ab.runtime import compile_cache
from atlas_ab.speculative import pit_gate
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.lossless_gate import Arbiter, check
from atlas_ab.speculative.precision import calibrate, calibration_tokens
from atlas_ab.speculative.run_ahead import runs_ahead
from atlas_ab.speculative.sampling import plan_of
from atlas_ab.speculative.targets import LiveTarget

log = logging.getLogger(__name__)
DEFAULT_TOKENIZER = PACKAGE_DIR / "models" / "default" / "tokenizer.json"


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(spec)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise AtlasError(f"runner.device={spec}: no CUDA device is available here")
    return dev


def resolve_dtype(spec: str, device: torch.device) -> torch.dtype:
    if spec == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[spec]
    except KeyError:
        raise AtlasError(f"runner.dtype={spec!r} must be auto, float32, bfloat16 or float16") from None


class Runner:
    """The real engine behind `engine.Engine`: loads the target (+ drafter), builds the
    workload and runs waves of the speculative loop, each checked by the lossless gate."""

    def __init__(self, arm: ArmConfig, model: ModelConfig, workload: WorkloadConfig, runner: RunnerConfig):
        from atlas_ab.runtime import checkpoint
        from atlas_ab.workload.documents import build_workload

        validate_run(arm, model, workload, runner)
        self.arm, self.cfg = arm, runner
        self.plan = plan_of(self.arm, workload.sampling)     # None: greedy verification
        self.device = resolve_device(runner.device)
        if self.device.type == "cuda":
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            # the job's GPU becomes the current device: Triton kernels and CUDA graphs launch on the
            # current device, whatever device their tensors are on
            torch.cuda.set_device(self.device)
        # before any kernel is built: Triton's and inductor's caches where a later process finds them
        self.compile_caches = compile_cache.persist(runner.compile_cache) if self.device.type == "cuda" else None
        self.dtype = resolve_dtype(runner.dtype, self.device)
        torch.manual_seed(runner.seed)
        self.graphs = self.device.type == "cuda" and runner.cuda_graphs

        path = Path(resolve_path(model.path)) if model.path else None
        if model.init == "random":
            from atlas_ab.runtime.presets import random_checkpoint
            ck = random_checkpoint(model, DEFAULT_TOKENIZER, self.device, self.dtype, runner.seed)
        else:
            ck = checkpoint.load(path, self.device, self.dtype)
        if ck.tokenizer_path is None:
            raise AtlasError(f"{path}: no tokenizer.json in the checkpoint directory")
        self.trunk = ck.trunk.eval()
        self.proposer = self._proposer(ck, model)
        require(self.proposer, self.arm)    # the arm's capabilities (proposers/capabilities.py), before any wave
        self.workload = build_workload(workload, ck.tokenizer_path)
        docs = self.workload.docs
        # Every position a run reaches must be one the model was built for (RoPE past
        # max_position_embeddings is extrapolation the checkpoint never saw).
        reach = max(sum(len(c) for c in d.chunks) for d in docs) + workload.turns * workload.gen_tokens \
            + self.arm.num_drafts + 1
        if reach > ck.args.max_position_embeddings:
            raise AtlasError(f"workload reaches position {reach}, past the model's max_position_embeddings="
                             f"{ck.args.max_position_embeddings} (fewer turns or tokens per turn)")
        bw = runner.batch_width
        self.waves = [[d.doc_id for d in docs[i:i + bw]] for i in range(0, len(docs), bw)]
        self._docs = {d.doc_id: d for d in docs}
        # with graphs, every wave runs at the run's widest token budget: one static shape, so one
        # wave's step graphs serve the next (captured once per run, not per wave)
        self.capacity = reach + 1 if self.graphs else None
        self.fuse = fuse_for(runner, steps_bound(len(self.waves), workload.turns, workload.gen_tokens))
        self._live = None
        self._arbiter = Arbiter(self.trunk)   # the gate's fp32 arbiter: built when a divergence needs it, maybe kept
        # the greedy gate's near-tie bound, measured for this checkpoint, dtype and device (one forward each
        # in the dtype and in fp32 over a few of the workload's documents: speculative/precision.py)
        self.near_tie = calibrate(self.trunk, calibration_tokens(docs)) if self.plan is None else None
        self.mode = runner.mode
        replay = self._trajectories(ck, runner) if self.mode == "replay" else None
        trunk_n, mtp_n = n_params(self.trunk), n_params(ck.mtp)
        self.info = RunInfo(
            model={"name": model.name, "path": str(path) if path else None, "hash": ck.hash, "init": model.init,
                   "tokenizer_hash": self.workload.info.get("tokenizer_hash"),
                   "architecture": ck.args.as_dict(),
                   "params": {"trunk": trunk_n, "mtp": mtp_n, "total": trunk_n + mtp_n},
                   "mtp_layout": ck.layout.name if ck.layout is not None else None,
                   "handoff": self.handoff, "draft": self._draft_info,
                   **({"drafter_numerics": self._numerics} if self._numerics else {})},
            workload={"hash": self.workload.hash, **self.workload.info,
                      "sampling": {k: getattr(workload.sampling, k)
                                   for k in ("temperature", "top_p", "top_k", "seed")}},
            device=torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu",
            dtype=str(self.dtype).replace("torch.", ""),
            row_space=self.arm.row_space, proposer=self.arm.proposer,
            levers={**{k: getattr(self.arm, k) for k in self.arm.__dataclass_fields__},
                    "fingerprints": self.arm.fingerprints_on},
            mode=self.mode, replay=replay,
            loop="run_ahead" if self.mode == "live" and runner.run_ahead and self.arm.num_drafts
            and runs_ahead(self.arm, self.graphs, self.proposer) else "step_by_step",
            # plain decode (K = 0: run/plain.py) has no bookkeeping to compile
            fused=bool(self.mode == "live" and self.graphs and self.fuse and self.arm.num_drafts),
            timing_only=timing_only(self.arm))

    def _trajectories(self, ck, runner: RunnerConfig) -> dict:
        """Replay: find (or build, once across concurrent jobs) the workload's stored trajectory."""
        from atlas_ab.speculative.trajectory import EXTEND, greedy, sampled
        from atlas_ab.speculative.trajectory_store import TrajectoryStore

        fields = {"model_hash": ck.hash, "tokenizer_hash": self.workload.info.get("tokenizer_hash"),
                  "workload_hash": self.workload.hash, "dtype": str(self.dtype).replace("torch.", ""),
                  "device": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu",
                  "torch": torch.__version__, "graphs": self.graphs, "gen_tokens": self.workload.gen_tokens,
                  "extend": EXTEND, "waves": self.waves}
        feats = tuple(self.proposer.feature_layers)
        if feats:                 # a drafter handed other layers' streams (EAGLE-3): another trajectory's
            fields["features"] = list(feats)   # key; absent otherwise, so every existing key is unchanged
        plan = self.plan
        if plan is not None:      # a sampled trajectory: the target's rule and the seed decide it
            fields["sampling"] = {"temperature": plan.target.temperature, "top_k": plan.target.top_k,
                                  "top_p": plan.target.top_p, "seed": plan.seed}
        self.trajectories = TrajectoryStore(Path(runner.trajectories), fields)
        G = self.workload.gen_tokens
        if plan is None:
            build = lambda i: greedy(self.trunk, self.docs_of(i), G, extend=EXTEND,  # noqa: E731
                                     keep_hiddens=True, graphs=self.graphs, features=feats)
        else:
            build = lambda i: sampled(self.trunk, self.docs_of(i), G, plan.target, plan.seed,  # noqa: E731
                                      extend=EXTEND, keep_hiddens=True, graphs=self.graphs, features=feats)
        return self.trajectories.ensure(len(self.waves), build)

    def _proposer(self, ck, model: ModelConfig):
        """The arm's drafter family, built by its registered builder (proposers/registry.py)."""
        from atlas_ab.proposers.registry import Target, build

        built = build(Target(ck, model, self.arm, self.device, self.dtype))
        self.handoff, self._draft_info = built.manifest.get("handoff"), built.manifest.get("draft")
        self._numerics = built.manifest.get("drafter_numerics")     # HEAD_FP8 / KV_FP8 / HEAD_SHARDS, when on
        return built.proposer

    def docs_of(self, wave: int):
        return [self._docs[i] for i in self.waves[wave]]

    def _wave(self, target, docs, on_step=None):
        # FINGERPRINTS hashes with the Wave's own FNV-1a (telemetry/fingerprint.py)
        return Wave(target, self.proposer, self.arm, docs, self.workload.gen_tokens, on_step=on_step,
                    sampling=self.plan, capacity=self.capacity, run_ahead=self.cfg.run_ahead).run()

    def _live_target(self) -> LiveTarget:
        """The run's one live target: its KV pool and step graphs serve every wave. Replay's live check
        waves run their bookkeeping eagerly: their rows are compared, never timed, and the compile
        would cost each arm seconds (the manifest's `fused` says false for replay runs)."""
        if self._live is None:
            self._live = LiveTarget(self.trunk, self.graphs, fuse=self.fuse and self.mode == "live",
                                    features=self.proposer.feature_layers)
        return self._live

    def _pit_gate(self, docs, trace) -> dict:
        """A sampled wave's gate: KS of its PITs, at the run's alpha split over its waves."""
        u = np.concatenate(trace.pit) if trace.pit else np.zeros(0)
        return pit_gate.check(u, len(docs), alpha=pit_gate.ALPHA / len(self.waves))

    def _live_gate(self, docs, trace) -> dict:
        if self.plan is not None:
            return self._pit_gate(docs, trace)
        n_gate = min(gate_sequences_for(self.cfg, self.device.type), len(docs))
        gate = check(self.trunk, docs, trace.generated, self.workload.gen_tokens, list(range(n_gate)), self._arbiter,
                     self.near_tie)
        return {**gate.to_dict(), "by": "live"}

    def run_wave(self, i: int, on_step=None) -> WaveResult:
        docs = self.docs_of(i)
        if self.mode == "replay":
            return self._replay_wave(i, docs, on_step)
        if self.arm.num_drafts == 0:
            return self._plain_wave(docs, on_step)
        trace = self._wave(self._live_target(), docs, on_step)
        return WaveResult(steps=trace.steps.table(),
                          events=trace.events.table() if trace.events is not None else None,
                          gate=self._live_gate(docs, trace), n_tokens=trace.n_tokens)

    def _plain_wave(self, docs, on_step=None) -> WaveResult:
        """K = 0: plain decode, timed as the loop times its steps (run/plain.py)."""
        from atlas_ab.run.plain import plain_wave

        trace = plain_wave(self.trunk, docs, self.workload.gen_tokens, self.arm.name, self.graphs, self.capacity,
                           on_step)
        return WaveResult(steps=trace.steps, events=None, gate=self._live_gate(docs, trace), n_tokens=trace.n_tokens)

    def _replay_wave(self, i: int, docs, on_step=None) -> WaveResult:
        from atlas_ab.speculative.replay_check import compare_live, replay_gate
        from atlas_ab.speculative.targets import ReplayTarget

        traj = self.trajectories.load(i)
        if traj.doc_ids.tolist() != self.waves[i]:
            raise AtlasError(f"trajectory {self.trajectories.dir}: wave {i} holds docs {traj.doc_ids.tolist()}, "
                             f"the run's wave {self.waves[i]}")
        before = self.proposer.carried() if i < self.cfg.replay_check_waves else None   # suffix's global tree
        trace = self._wave(ReplayTarget(traj, self.device, logits=self.trunk.logits if self.plan else None,
                                        graphs=self.graphs), docs, on_step)
        steps = trace.steps.table()
        gate, checked = replay_gate(traj, trace.generated), None
        if self.plan is not None:     # the stored trajectory's own draws, in distribution
            gate = aggregate_gate([gate, self._pit_gate(docs, trace)])
        live_s = 0.0
        if i < self.cfg.replay_check_waves:
            t0 = time.perf_counter()
            after = self.proposer.carried()
            self.proposer.carry(before)          # the live check starts where the replay wave did, and leaves
            live = self._wave(self._live_target(), docs)
            self.proposer.carry(after)           # the next wave where the replay left it
            if self.plan is None:     # sampled: live and replay draw different texts; equal in law (docs/sampling.md)
                checked = compare_live(traj, steps, live.steps.table(), live.generated)
            gate = aggregate_gate([gate, self._live_gate(docs, live)])
            live_s = time.perf_counter() - t0
        return WaveResult(steps=steps, events=trace.events.table() if trace.events is not None else None,
                          gate=gate, n_tokens=trace.n_tokens, replay_check=checked, live_check_s=live_s)


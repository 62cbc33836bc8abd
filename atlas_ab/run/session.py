"""One run of one arm, start to finish: config -> checks -> device -> engine -> store -> summary.

The session owns everything around the engine's waves: it validates the whole config
before anything loads, locks the study's pre-registrations, claims a device and a thread
count, opens (or resumes) the run store under its lock, feeds the waves the store does not
hold yet, turns the lossless gate's outcome into the run's status, and writes the summary.
Every failure ends as one line (AtlasError) with the run marked `failed`; nothing
half-written is left looking like data. An invocation refused before it owns a run (the
directory is another process's, or holds a run it may not touch) writes nothing at all.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

from omegaconf import DictConfig, OmegaConf

from atlas_ab import AtlasError
from atlas_ab.config.hydra_schema import check_keys
from atlas_ab.config.levers import arm_from_env, env_report, resolved_levers
from atlas_ab.config.paths import resolve_path
from atlas_ab.config.prereg import load_prereg, lock
from atlas_ab.config.structured import (
    ArmConfig,
    ModelConfig,
    RunnerConfig,
    StudyConfig,
    WorkloadConfig,
    validate_run,
)
from atlas_ab.errors import one_line
from atlas_ab.run.device import DeviceClaim, set_threads, thread_count
from atlas_ab.run.engine import Engine, RunInfo
from atlas_ab.run.progress import Progress
from atlas_ab.run.provenance import code_identity, host, versions
from atlas_ab.run.shard_writer import ShardWriter
from atlas_ab.run.startup import StartupClock, startup_line
from atlas_ab.run.store import RunStore, write_failed_manifest
from atlas_ab.telemetry.acceptance import histogram_rates, step_histogram

log = logging.getLogger("atlas_ab")


@dataclass
class Job:
    """Where and how Hydra launched this job."""
    run_dir: Path
    num: int = 0
    multirun: bool = False
    sweep_dir: Optional[Path] = None    # the sweep's directory (multirun), where a study locks its preregs
    side_by_side: int = 1               # jobs the launcher runs at once on this host (threads are shared)
    hydra_subdir: Optional[Path] = None  # where Hydra saved this invocation's config
    device: Optional[str] = None        # a device already claimed for this job (a study driving its arms)


@dataclass
class Configs:
    arm: ArmConfig
    model: ModelConfig
    workload: WorkloadConfig
    runner: RunnerConfig
    study: StudyConfig


def configs(cfg: DictConfig, out=None) -> Configs:
    """The composed config as checked dataclasses: unknown keys, types, ranges, combinations."""
    check_keys(cfg)
    c = Configs(*(OmegaConf.to_object(cfg[g]) for g in ("arm", "model", "workload", "runner", "study")))
    if c.arm.name == "env":
        # +arm=env: the levers come from the reference engine's ATLAS_MTP_* variables, parsed as the
        # engine parses them (clamps included), then checked like any arm.
        c.arm = arm_from_env(os.environ, name="env")
        for line in env_report(os.environ):
            print(line, file=sys.stderr if out is None else out)
    validate_run(c.arm, c.model, c.workload, c.runner)
    if c.study.arms and c.arm.name not in c.study.arms:
        raise AtlasError(f"arm {c.arm.name!r} is not in study {c.study.name!r} (arms: {', '.join(c.study.arms)})")
    if c.study.kind == "ladder":
        from atlas_ab.run.ladder_grid import check_grid

        check_grid(c)
    elif c.study.kind != "ab":
        raise AtlasError(f"study.kind={c.study.kind!r} must be ab or ladder")
    return c


def compose_configs(overrides: list[str]) -> Configs:
    """The checked configs `python -m atlas_ab OVERRIDES` would run, composed without the CLI (the
    benches build runners in one process)."""
    from hydra import compose, initialize_config_dir

    from atlas_ab.config.hydra_schema import CONF_DIR
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return configs(compose(config_name="config", overrides=overrides))


def engine_factory(engine) -> Callable:
    """The engine class `runner.engine` names, as the partial Hydra's instantiate builds from its
    `_target_` (the session then calls it with the four configs)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(engine, _partial_=True)
    except InstantiationException as ex:
        why = ex.__cause__ or ex
        raise AtlasError(f"runner.engine._target_={engine._target_!r} cannot be loaded: "
                         + " ".join(str(why).split())) from None


def engine_name(factory) -> str:
    """The dotted name of the class a factory builds (the manifest's `engine`)."""
    cls = getattr(factory, "func", factory)
    return f"{cls.__module__}.{cls.__qualname__}"


def acceptance_summary(steps) -> dict:
    """n steps, p1, p2_uncond, p2_cond, tokens/step: the definitions the analysis uses too."""
    if steps.num_rows == 0:
        return {"n_steps": 0, "n_serial": 0}
    k, a = steps.column("k").to_numpy(), steps.column("accept_len").to_numpy()
    r = histogram_rates(step_histogram(k, a, int(k.max())))
    out = {"n_steps": int(r["n_steps"]), "n_serial": int(r["n_serial"])}
    for key in ("p1", "p2_uncond", "p2_cond", "tokens_per_step"):
        v = r.get(key)
        if v is not None and v == v:     # NaN: the depth was never observed
            out[key] = float(v)
    return out


def gate_words(gate: dict) -> str:
    status = gate.get("status") or {True: "passed", False: "FAILED", None: "not run"}[gate.get("passed")]
    by = f" by {gate['by']}" if gate.get("by") not in (None, "live") else ""
    return (f"lossless gate {status}{by} ({gate.get('checked_sequences', 0)} seqs, "
            f"{gate.get('divergences', 0)} divergences"
            + (f", {gate['arbitrated']} arbitrated in fp32" if gate.get("arbitrated") else "") + ")")


def summary_line(manifest: dict) -> str:
    s = manifest.get("summary") or {}
    parts = [f"arm {manifest.get('arm')}", f"steps {s.get('n_steps', 0)} (serial {s.get('n_serial', 0)})"]
    for key, label in (("p1", "p1"), ("p2_uncond", "p2_uncond"), ("p2_cond", "p2_cond"),
                       ("tokens_per_step", "tokens/step")):
        if key in s:
            parts.append(f"{label} {s[key]:.4f}")
    parts.append(gate_words(manifest.get("gate") or {}))
    head_fp8 = ((manifest.get("model") or {}).get("drafter_numerics") or {}).get("head_fp8", "")
    if head_fp8.startswith("emulated"):     # never silent: the FP8 head ran as its emulation (runtime/fp8.py)
        parts.append(f"FP8 head {head_fp8}")
    return "  ".join(parts)


def lock_preregs(study: StudyConfig, job: Job) -> list[dict]:
    """The study's pre-registrations, locked once per study before its first step."""
    out = []
    for given in study.preregs:
        path = resolve_path(given)
        if not Path(path).is_file():
            raise AtlasError(f"study {study.name!r}: pre-registration {given} not found ({path})")
        pr = load_prereg(path)
        missing = [a for a in pr.arms if study.arms and a not in study.arms]
        if missing:
            raise AtlasError(f"study {study.name!r}: pre-registration {given} names arm {missing[0]!r}, "
                             f"which the study does not run (arms: {', '.join(study.arms)})")
        entry = lock(path, job.sweep_dir or job.run_dir)
        if entry["source_sha256"] != entry["sha256"]:
            log.warning("pre-registration %s changed after the study began; the locked copy %s decides",
                        given, entry["locked_copy"])
        out.append(entry)
    return out


class RunSession:
    def __init__(self, cfg: DictConfig, job: Job, out=None):
        self.cfg, self.job = cfg, job
        self.out = sys.stdout if out is None else out
        self.store: Optional[RunStore] = None
        self.claim: Optional[DeviceClaim] = None
        self.fresh = False     # this job's own new directory (no run in it before): a failure is recorded there
        self.base: dict[str, Any] = {"arm": None}
        self.clock = StartupClock()    # where the wall time went (run/startup.py)

    def run(self) -> dict:
        """Run (or resume) the arm; returns the final manifest. Raises AtlasError on bad input."""
        try:
            self.open()
            if self.store.manifest.get("status") != "complete":
                self.run_waves()
                self.finish()
        finally:
            self.close()
        return self.report()

    def open(self) -> "RunSession":
        """Everything before the first wave: checks, the run lock, the pre-registrations' lock, the
        device, the engine, and the store started or resumed. `run_waves`, then `finish` or `stop`,
        then `close` (always) follow; a study driver calls them wave by wave."""
        self.base = base = {"arm": None, "config": OmegaConf.to_container(self.cfg, resolve=True)}
        run_dir = self.job.run_dir
        self.store = store = RunStore(run_dir)
        with self._failing():
            store.lock()
            self.fresh = not store.manifest_path.exists()
            self.c = c = configs(self.cfg, self.out)
            base["arm"] = c.arm.name
            base["levers"] = resolved_levers(c.arm)
            resume = c.runner.resume
            if resume and resume != "auto" and self.job.multirun:
                raise AtlasError("runner.resume=PATH continues one run; to resume a sweep pass "
                                 "hydra.sweep.dir=<the sweep's dir> runner.resume=auto")
            if resume and resume != "auto" and Path(resume).resolve() != run_dir.resolve():
                raise AtlasError(f"runner.resume={resume} but the run directory is {run_dir} "
                                 "(do not set hydra.run.dir together with runner.resume)")
            if not self.fresh and not resume:
                raise AtlasError(f"{run_dir} already holds a run; continue it with runner.resume={run_dir} "
                                 "or choose another hydra.run.dir")
            resuming = not self.fresh
            if resuming:
                store.check_resumable(base["config"])     # before any model loads
            preregs = lock_preregs(c.study, self.job)
            # Paths resolve against the launch dir / package root, never Hydra's output dir.
            c.model.path = resolve_path(c.model.path)
            c.model.draft_path = resolve_path(c.model.draft_path)
            make_engine = engine_factory(c.runner.engine)     # imports torch where the engine uses it
            self.clock.imported()
            threads = set_threads(thread_count(c.runner.threads, self.job.side_by_side))
            self.claim = DeviceClaim(self.job.device or c.runner.device, self.job.num)
            if self.fresh:
                log.info("arm %s: loading %s (device %s, %d threads)", c.arm.name, engine_name(make_engine),
                         self.claim.device, threads)
            self.engine = engine = make_engine(c.arm, c.model, c.workload,
                                               replace(c.runner, device=self.claim.device))
            info: RunInfo = engine.info
            self.clock.built(getattr(engine, "compile_caches", None))
            self.waves = waves = [list(w) for w in engine.waves]
            base.update({
                **{k: v for k, v in info.to_dict().items()},
                "engine": engine_name(make_engine),
                "study": {"name": c.study.name, "arms": list(c.study.arms)} if c.study.name else None,
                "preregs": preregs,
                "code": code_identity(), "versions": versions(), "host": {**host(), "threads": threads},
                # the device this job claimed (cuda:N of the job's view; CUDA_VISIBLE_DEVICES as set)
                "device_claim": {"device": self.claim.device, "job": self.job.num,
                                 "visible": os.environ.get("CUDA_VISIBLE_DEVICES")},
                "seed": c.runner.seed, "seeds": {"runner": c.runner.seed, "workload": c.workload.seed},
                "waves": {"total": len(waves), "batch_width": c.runner.batch_width},
                "run_dir": str(run_dir.resolve()),
            })
            if resuming:
                check = {"model.hash": info.model.get("hash"), "workload.hash": info.workload.get("hash"),
                         "replay.hash": (info.replay or {}).get("hash"),
                         "code.hash": base["code"]["hash"]}   # waves of one run ran one code
                store.resume(base["config"], check, preregs)
                log.info("resuming %s (%s, device %s, %d threads): %d of %d waves already stored", run_dir,
                         engine_name(make_engine), self.claim.device, threads, len(store.done_waves()), len(waves))
                for wave in store.rebuilt:
                    log.warning("%s: wave %d's shard is missing or no longer matches its sha256; "
                                "it is recomputed", run_dir, wave)
            else:
                store.start(base)
        return self

    def run_waves(self, upto: Optional[int] = None) -> None:
        """Run and store the waves below `upto` (all: None) that the store does not hold yet; each
        lands whole before this returns, so a kill after it loses none of them."""
        with self._failing():
            self._waves(self.store, self.engine, self.waves, self.c, upto)

    def finish(self) -> dict:
        """The run is complete: every wave stored, the gate's outcome checked."""
        with self._failing():
            self._check_measured(self.store, self.waves, self.c)
            return self.store.finish("complete", summary=acceptance_summary(self.store.read_steps()),
                                     timings=self.clock.timings())

    def stop(self, why: dict) -> dict:
        """The run stops before its last wave because its study decided (`why`: the study's name, the
        look, the decision): status `stopped`, which the analysis reads as final, and which a resume
        (`runner.resume`) continues like any unfinished run."""
        with self._failing():
            self._check_measured(self.store, self.waves, self.c)
            return self.store.finish("stopped", summary=acceptance_summary(self.store.read_steps()),
                                     stopped=why, timings=self.clock.timings())

    def note(self, key: str, value: Any) -> None:
        """Record `value` under `key` in the run's manifest (a study's looks, between waves)."""
        with self._failing():
            self.store.manifest[key] = value
            self.store.save()

    def close(self) -> None:
        """Release the device and the run directory (after a failure too)."""
        if self.claim is not None:
            self.claim.release()
            self.claim = None
        if self.store is not None:
            self.store.unlock()

    def report(self) -> dict:
        """Print where the run is and its summary line; returns the manifest."""
        manifest, run_dir = self.store.manifest, self.job.run_dir
        log.info("run %s: %s", manifest["status"], summary_line(manifest))
        print(f"run: {run_dir}  ({manifest['status']}, {len(manifest['shards'])} shards, "
              f"{manifest['rows']['steps']} step rows{', resumed' if manifest.get('resumed') else ''})",
              file=self.out)
        print(summary_line(manifest), file=self.out)
        if manifest.get("timings"):
            print(startup_line(manifest["timings"]), file=self.out)
        self.out.flush()
        return manifest

    @contextmanager
    def _failing(self):
        """Any failure is recorded in the run it belongs to (`_fail`) and raised on."""
        try:
            yield
        except BaseException as ex:
            self._fail(ex, self.base)
            raise

    def _waves(self, store: RunStore, engine: Engine, waves: list, c: Configs, upto: Optional[int] = None) -> None:
        done = store.done_waves()
        todo = [i for i in range(len(waves) if upto is None else min(upto, len(waves))) if i not in done]
        per_doc = c.workload.turns * c.workload.gen_tokens
        prog = Progress(total_tokens=sum(len(w) for w in waves) * per_doc,
                        done_tokens=sum(int(s.get("tokens", 0)) for s in store.manifest["shards"]),
                        stored=store.read_steps() if done else None,
                        enabled=c.runner.progress, desc=c.arm.name)
        try:
            with ShardWriter(store, behind=c.runner.write_behind) as writer:   # wave i lands while i+1 runs
                for i in todo:
                    t0 = time.perf_counter()
                    res = engine.run_wave(i, on_step=prog.on_step)
                    dt = time.perf_counter() - t0
                    writer.submit(i, waves[i], res.steps, res.events, res.gate, res.n_tokens, dt,
                                  replay_check=res.replay_check)
                    prog.wave_done(i, len(waves[i]), res.n_tokens, res.steps, dt)
                    self.clock.wave_done(dt, live_check=res.live_check_s)
        finally:
            prog.close()

    def _check_measured(self, store: RunStore, waves: list, c: Configs) -> None:
        """Before a run is final: its gate passed (or says it ran nothing), and it verified steps."""
        gate = store.manifest.get("gate") or {}
        if gate.get("passed") is False:
            # Not lossless at a clear margin: the run fails loudly (status "failed", which the
            # analysis refuses), naming the first divergence.
            d = gate.get("first_divergence") or {}
            if d.get("summary"):
                raise AtlasError(f"lossless gate failed: {d['summary']}")
            raise AtlasError(
                f"lossless gate failed: doc {d.get('doc_id')} turn {d.get('turn')} token {d.get('token')}: "
                f"speculative {d.get('speculative')} vs target-only {d.get('target_only')} "
                f"at top-1/top-2 margin {d.get('margin')}" + (f" ({d['why']})" if d.get("why") else ""))
        if gate.get("status") == "not run":
            log.warning("the lossless gate checked no sequence (runner.gate_sequences=0): the run is "
                        "marked 'gate not run' and a pre-registered report refuses it unless told otherwise")
        if not store.manifest["rows"]["steps"]:
            raise AtlasError(f"the run verified no step in {len(waves)} waves: nothing was measured "
                             f"(workload.gen_tokens={c.workload.gen_tokens})")

    def _fail(self, ex: BaseException, base: dict) -> None:
        """Record the failure in the run it belongs to; a refused invocation writes nothing."""
        msg = one_line(ex) if isinstance(ex, Exception) else f"interrupted ({type(ex).__name__})"
        msg = msg or f"{type(ex).__name__}: {ex}"
        store = self.store
        if store is not None and store.manifest:       # this session started or resumed the run
            log.error("run failed: %s", msg, extra={"console": False})
            try:
                store.fail(msg)
            except Exception:  # noqa: BLE001 -- the disk may be what failed; the tmp debris is gone
                pass
        elif store is not None and store.locked and self.fresh:   # a directory Hydra made for this job
            log.error("run failed: %s", msg, extra={"console": False})
            write_failed_manifest(self.job.run_dir, base, msg)
        else:       # another process's directory, or an existing run this invocation may not touch
            self._drop_refused_hydra_subdir()

    def _drop_refused_hydra_subdir(self) -> None:
        """A refused re-run leaves nothing in the run it refused to touch (Hydra saved this
        invocation's config under .hydra/resume-<time> before the session started)."""
        sub = self.job.hydra_subdir
        if sub is not None and sub.name.startswith("resume-") and sub.is_dir():
            shutil.rmtree(sub, ignore_errors=True)


def run(cfg: DictConfig, run_dir: str | Path, job_num: int = 0, multirun: bool = False, out=None,
        **job) -> dict:
    """Run one arm into `run_dir` (the library form of `python -m atlas_ab`)."""
    return RunSession(cfg, Job(Path(run_dir), job_num, multirun, **job), out).run()

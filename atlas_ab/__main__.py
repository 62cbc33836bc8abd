"""`python -m atlas_ab +arm=NAME [group=option ...] [key=value ...]` runs one arm; `-m` sweeps.

    python -m atlas_ab +arm=refeed_on
    python -m atlas_ab +arm=refeed_on workload=tiny runner.batch_width=4
    python -m atlas_ab -m '+arm=glob(*)'                 # every arm, same workload
    python -m atlas_ab -m +arm=baseline,refeed_on hydra/launcher=local_gpus
    python -m atlas_ab -m +study=refeed                  # the study's arms + its pre-registration
    python -m atlas_ab +arm=refeed_on runner.resume=runs/2025-01-01/12-00-00_refeed_on

Bad input (unknown arm or key, wrong type, out-of-range lever, REFEED without
CATCHUP, missing/corrupt checkpoint, unwritable run directory) is ONE line on
stderr and exit status 2, with no traceback. See docs/frontend.md.
"""
from __future__ import annotations

import importlib
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from atlas_ab import AtlasError
from atlas_ab import schema
from atlas_ab.config import (ArmConfig, ModelConfig, RunnerConfig, StudyConfig, WorkloadConfig,
                             resolve_path, validate_arm)
from atlas_ab.levers import arm_from_env, resolved_levers
from atlas_ab.progress import Progress
from atlas_ab.provenance import git_info, host, sha256_file, versions
from atlas_ab.store import RunStore, write_failed_manifest

log = logging.getLogger("atlas_ab")

EXIT_BAD_INPUT = 2


# ----------------------------------------------------------------------------
# Device: runner.device=auto -> cuda:(job.num % device_count), else cpu.

class DeviceClaim:
    """The device a job runs on, plus an advisory lock when it shares a host's GPUs with other jobs.

    With auto and several local GPUs (the joblib launcher), job n prefers
    cuda:(n % device_count); if another running job of this host already holds
    that GPU (a loky worker finished early and picked up job n+count), it takes
    the first free one instead, and waits for its preferred one only when all
    are held. The lock (flock on a file in the temp dir) is released when the
    job ends.
    """

    def __init__(self, spec: str, job_num: int):
        self.fd: Optional[int] = None
        self.device = spec
        if spec != "auto":
            return
        try:
            import torch

            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception:  # noqa: BLE001
            count = 0
        if count == 0:
            self.device = "cpu"
            return
        if count == 1:
            self.device = "cuda:0"
            return
        import fcntl

        pref = job_num % count
        order = [(pref + i) % count for i in range(count)]
        for i in order:
            fd = os.open(os.path.join(tempfile.gettempdir(), f"atlas_ab-cuda{i}.lock"), os.O_CREAT | os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.fd, self.device = fd, f"cuda:{i}"
            return
        fd = os.open(os.path.join(tempfile.gettempdir(), f"atlas_ab-cuda{pref}.lock"), os.O_CREAT | os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.fd, self.device = fd, f"cuda:{pref}"

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None


# ----------------------------------------------------------------------------

def load_runner_class(impl: str):
    mod, _, name = impl.partition(":")
    if not mod or not name:
        raise AtlasError(f"runner.impl={impl!r} must be 'module:Class'")
    try:
        return getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as ex:
        raise AtlasError(f"runner.impl={impl!r} cannot be loaded: {ex}") from None


def acceptance_summary(steps, arm: str) -> dict:
    """n steps, p1, p2_uncond, p2_cond, tokens/step (atlas_ab.analysis.metrics when present)."""
    import pandas as pd

    df = steps.select([c for c in ("doc_id", "turn", "step", "k", "accept_len")
                       if c in steps.column_names]).to_pandas()
    if len(df) == 0:
        return {"n_steps": 0}
    try:
        from atlas_ab.analysis.metrics import cell_counts, rates

        r = rates(cell_counts(df, arm))
        out = {"n_steps": int(r["n_steps"]), "n_serial": int(r["n_serial"])}
        for key in ("p1", "p2_uncond", "p2_cond", "tokens_per_step"):
            if key in r and r[key] is not None and not pd.isna(r[key]):
                out[key] = float(r[key])
        return out
    except (ImportError, AttributeError, KeyError):
        pass
    k, a = df["k"], df["accept_len"]
    out = {"n_steps": int(len(df)), "n_serial": int((k == 0).sum())}

    def ratio(num, den):
        return float(num.sum() / den.sum()) if den.sum() else None

    out["p1"] = ratio((a >= 1) & (k >= 1), k >= 1)
    if (k >= 2).any():
        out["p2_uncond"] = ratio((a >= 2) & (k >= 2), k >= 2)
        out["p2_cond"] = ratio((a >= 2) & (k >= 2), (a >= 1) & (k >= 2))
    if (k >= 1).any():
        out["tokens_per_step"] = float((1 + a[k >= 1]).mean())
    return {key: v for key, v in out.items() if v is not None}


def summary_line(manifest: dict) -> str:
    s = manifest.get("summary") or {}
    parts = [f"arm {manifest.get('arm')}", f"steps {s.get('n_steps', 0)} (serial {s.get('n_serial', 0)})"]
    for key, label in (("p1", "p1"), ("p2_uncond", "p2_uncond"), ("p2_cond", "p2_cond"),
                       ("tokens_per_step", "tokens/step")):
        if key in s:
            parts.append(f"{label} {s[key]:.4f}")
    g = manifest.get("gate") or {}
    verdict = {True: "passed", False: "FAILED", None: "not checked"}[g.get("passed")]
    parts.append(f"lossless gate {verdict} ({g.get('checked_sequences', 0)} seqs, "
                 f"{g.get('divergences', 0)} divergences)")
    return "  ".join(parts)


def _config_objects(cfg: DictConfig):
    arm = OmegaConf.to_object(cfg.arm)
    model = OmegaConf.to_object(cfg.model)
    workload = OmegaConf.to_object(cfg.workload)
    runner = OmegaConf.to_object(cfg.runner)
    study = OmegaConf.to_object(cfg.study)
    return arm, model, workload, runner, study


def _prereg(study: StudyConfig) -> Optional[dict]:
    if not study.prereg:
        return None
    path = resolve_path(study.prereg)
    if not Path(path).is_file():
        raise AtlasError(f"study {study.name!r}: pre-registration {study.prereg} not found ({path})")
    return {"path": study.prereg, "resolved": path, "sha256": sha256_file(path)}


def run(cfg: DictConfig, run_dir: str | Path, job_num: int = 0, multirun: bool = False,
        out=None) -> dict:
    """Run (or resume) one arm into `run_dir`; returns the final manifest. Raises AtlasError on bad input."""
    out = sys.stdout if out is None else out
    run_dir = Path(run_dir)
    config = OmegaConf.to_container(cfg, resolve=True)
    base: dict[str, Any] = {"arm": None, "config": config}
    owned: Optional[RunStore] = None
    claim: Optional[DeviceClaim] = None
    try:
        arm, model, workload, rcfg, study = _config_objects(cfg)
        if arm.name == "env":
            # +arm=env: the levers come from the seeds' ATLAS_MTP_* variables, parsed as
            # the engine parses them (clamps included), then checked like any arm.
            arm = arm_from_env(os.environ, name="env")
        base["arm"] = arm.name
        validate_arm(arm)
        base["levers"] = resolved_levers(arm)
        if study.arms and arm.name not in study.arms:
            raise AtlasError(f"arm {arm.name!r} is not in study {study.name!r} (arms: {', '.join(study.arms)})")
        resume = rcfg.resume
        if resume and resume != "auto" and multirun:
            raise AtlasError("runner.resume=PATH continues one run; to resume a sweep pass "
                             "hydra.sweep.dir=<the sweep's dir> runner.resume=auto")
        resuming = bool(resume) and (run_dir / "manifest.json").exists()
        if resume and resume != "auto" and Path(resume).resolve() != run_dir.resolve():
            raise AtlasError(f"runner.resume={resume} but the run directory is {run_dir} "
                             "(do not set hydra.run.dir together with runner.resume)")
        prereg = _prereg(study)  # hashed before the first step runs

        # Paths resolve against the launch dir / package root, never Hydra's output dir.
        if model.init == "checkpoint" and not model.path:
            raise AtlasError(f"model {model.name!r}: model.path is required (e.g. model=path model.path=DIR)")
        if model.init not in ("checkpoint", "random"):
            raise AtlasError(f"model.init={model.init!r} must be 'checkpoint' or 'random'")
        model.path = resolve_path(model.path)
        model.draft_path = resolve_path(model.draft_path)
        claim = DeviceClaim(rcfg.device, job_num)
        rcfg_run = RunnerConfig(**{**vars(rcfg), "device": claim.device})
        cls = load_runner_class(rcfg.impl)
        log.info("arm %s: loading %s (device %s)", arm.name, rcfg.impl, claim.device)
        runner = cls(arm, model, workload, rcfg_run)
        info = dict(runner.info)
        waves = [list(w) for w in runner.waves]

        base.update({
            "levers": dict(info.get("levers") or resolved_levers(arm)),
            "row_space": info.get("row_space", arm.row_space),
            "proposer": info.get("proposer", arm.proposer),
            "model": info.get("model"),
            "workload": info.get("workload"),
            "study": {"name": study.name, "arms": list(study.arms)} if study.name else None,
            "prereg": prereg,
            "git": git_info(),
            "versions": versions(),
            "host": host(),
            "device": info.get("device", claim.device),
            "dtype": info.get("dtype", rcfg.dtype),
            "seed": rcfg.seed,
            "seeds": {"runner": rcfg.seed, "workload": workload.seed},
            "waves": {"total": len(waves), "batch_width": rcfg.batch_width},
            "run_dir": str(run_dir.resolve()),
        })
        store = RunStore(run_dir)
        if resuming:
            check = {"model.hash": (info.get("model") or {}).get("hash"),
                     "workload.hash": (info.get("workload") or {}).get("hash"),
                     "prereg.sha256" if prereg else "prereg": prereg["sha256"] if prereg else None}
            store.resume(config, check)
            owned = store
            log.info("resuming %s: %d of %d waves already stored", run_dir, len(store.done_waves()), len(waves))
        else:
            store.start(base)
            owned = store
        m = store.manifest
        if m.get("status") != "complete":
            done = store.done_waves()
            todo = [i for i in range(len(waves)) if i not in done]
            prog = Progress(total_docs=sum(len(w) for w in waves),
                            done_docs=sum(len(waves[i]) for i in done),
                            enabled=rcfg.progress, desc=arm.name)
            try:
                for i in todo:
                    t0 = time.perf_counter()
                    res = runner.run_wave(i, on_step=prog.on_step)
                    dt = time.perf_counter() - t0
                    store.add_shard(i, waves[i], res.steps, res.events, res.gate, res.n_tokens, dt)
                    prog.wave_done(i, len(waves[i]), res.n_tokens, res.steps, dt)
            finally:
                prog.close()
            summary = acceptance_summary(store.read_steps(), arm.name)
            gate = store.manifest.get("gate") or {}
            if gate.get("passed") is False:
                # Not lossless at a clear margin: the run fails loudly (status
                # "failed", which the analysis refuses), naming the first divergence.
                d = gate.get("first_divergence") or {}
                raise AtlasError(
                    f"lossless gate failed: doc {d.get('doc_id')} turn {d.get('turn')} token {d.get('token')}: "
                    f"speculative {d.get('speculative')} vs target-only {d.get('target_only')} "
                    f"at top-1/top-2 margin {d.get('margin')}")
            store.finish("complete", summary=summary)
        manifest = store.manifest
        log.info("run complete: %s", summary_line(manifest))
        print(f"run: {run_dir}  ({manifest['status']}, {len(manifest['shards'])} shards, "
              f"{manifest['rows']['steps']} step rows{', resumed' if manifest.get('resumed') else ''})",
              file=out)
        print(summary_line(manifest), file=out)
        out.flush()
        return manifest
    except BaseException as ex:
        msg = schema.one_line(ex) if isinstance(ex, Exception) else f"interrupted ({type(ex).__name__})"
        msg = msg or f"{type(ex).__name__}: {ex}"
        log.error("run failed: %s", msg, extra={"console": False})
        if owned is not None:
            try:
                owned.finish("failed", error=msg)
            except Exception:  # noqa: BLE001
                pass
        else:
            write_failed_manifest(run_dir, base, msg)
        raise
    finally:
        if claim is not None:
            claim.release()


def task(cfg: DictConfig) -> dict:
    """The Hydra task function (one job)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    schema.register()
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    return run(cfg, hc.runtime.output_dir, job_num=int(hc.job.num) if multirun else 0, multirun=multirun)


class _DropLines:
    """A stderr proxy that drops writes starting with `prefix` (everything else passes through)."""

    def __init__(self, stream, prefix: str):
        self._stream, self._prefix = stream, prefix

    def write(self, s: str) -> int:
        if s.startswith(self._prefix):
            return len(s)
        return self._stream.write(s)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def main() -> int:
    """Entry point: Hydra's main, with bad input turned into one line on stderr."""
    import hydra

    # Let exceptions reach us instead of Hydra's multi-line report; we print one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    entry = hydra.main(config_path=str(schema.CONF_DIR), config_name="config", version_base="1.3")(task)
    # Hydra writes "Error executing job with overrides: [...]" to stderr before re-raising a
    # job's exception; the one line below replaces it.
    real_stderr = sys.stderr
    sys.stderr = _DropLines(real_stderr, "Error executing job with overrides")
    try:
        entry()
    except Exception as ex:  # noqa: BLE001
        msg = schema.one_line(ex)
        if msg is None:
            raise
        print(f"atlas_ab: error: {msg}", file=real_stderr)
        return EXIT_BAD_INPUT
    finally:
        sys.stderr = real_stderr
    return 0


if __name__ == "__main__":
    sys.exit(main())

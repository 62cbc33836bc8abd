"""`python -m atlas_ab +arm=NAME [group=option ...] [key=value ...]` runs one arm; `-m` sweeps.

    python -m atlas_ab +arm=refeed_on
    python -m atlas_ab +arm=refeed_on workload=tiny runner.batch_width=4
    python -m atlas_ab -m '+arm=glob(*)'                 # every arm, same workload
    python -m atlas_ab -m +arm=baseline,refeed_on hydra/launcher=local_gpus
    python -m atlas_ab -m +study=refeed                  # the study's arms + its locked pre-registration
    python -m atlas_ab +arm=refeed_on runner.resume=runs/2025-01-01/12-00-00_refeed_on

Bad input (unknown arm or key, wrong type, out-of-range lever, REFEED without CATCHUP,
missing/corrupt checkpoint, unwritable run directory) is ONE line on stderr and exit
status 2, with no traceback. The job itself is `session.RunSession`; this module is only
Hydra's entry point.
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from atlas_ab.errors import one_line

EXIT_BAD_INPUT = 2


def task(cfg: DictConfig) -> dict:
    """The Hydra task function (one job)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from atlas_ab.run.session import Job, RunSession

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    out_dir = Path(hc.runtime.output_dir)
    n_jobs = hc.launcher.get("n_jobs") if multirun else None
    job = Job(run_dir=out_dir, num=int(hc.job.num) if multirun else 0, multirun=multirun,
              sweep_dir=Path(hc.sweep.dir) if multirun else None,
              side_by_side=int(n_jobs) if isinstance(n_jobs, int) and n_jobs > 0 else 1,
              hydra_subdir=out_dir / hc.output_subdir if hc.output_subdir else None)
    from atlas_ab.study.sequential import drive, sequential_preregs
    if sequential_preregs(OmegaConf.to_object(cfg.study)):      # its arms run in lockstep, in this one job
        search = [o for o in hc.overrides.hydra if o.startswith("hydra.searchpath=")]   # the user's config dirs
        return drive(cfg, job, list(hc.overrides.task), search=search)
    return RunSession(cfg, job).run()


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

    from atlas_ab.config import hydra_schema
    from atlas_ab.run import claim

    claim.register_resolver()       # each job locks its directory before Hydra writes into it
    # Let exceptions reach us instead of Hydra's multi-line report; we print one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    # A log line that cannot be written (run.log on a full disk) is dropped, not printed as a traceback.
    logging.raiseExceptions = False
    entry = hydra.main(config_path=str(hydra_schema.CONF_DIR), config_name="config", version_base="1.3")(task)
    # Hydra writes "Error executing job with overrides: [...]" to stderr before re-raising a
    # job's exception; the one line below replaces it.
    real_stderr = sys.stderr
    sys.stderr = _DropLines(real_stderr, "Error executing job with overrides")
    try:
        entry()
    except Exception as ex:  # noqa: BLE001
        msg = one_line(ex)
        if msg is None:
            raise
        print(f"atlas_ab: error: {msg}", file=real_stderr)
        return EXIT_BAD_INPUT
    finally:
        sys.stderr = real_stderr
    return 0


if __name__ == "__main__":
    sys.exit(main())

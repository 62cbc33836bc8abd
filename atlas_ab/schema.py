"""ConfigStore registration: the structured schema every composed config is checked against.

`AppConfig` is the root: `arm`, `model`, `workload`, `runner`, `study`, each a
dataclass from `config.py`. The primary config (`atlas_ab/conf/config.yaml`)
starts its defaults list with `atlas_schema`, so every group file and every
command-line override is merged onto typed, struct-mode nodes: an unknown key
or a wrong type is an error at composition time, before anything loads.

The group schemas are deliberately NOT stored under the group names (`arm`,
`model`, ...): a ConfigStore entry there would show up as an option, e.g. in
`+arm=glob(*)`.

Also registers the resolvers the Hydra config uses (`atlas.*`), at import.
"""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from atlas_ab.config import ArmConfig, ModelConfig, RunnerConfig, StudyConfig, WorkloadConfig

CONF_DIR = Path(__file__).resolve().parent / "conf"


@dataclass
class AppConfig:
    arm: ArmConfig = field(default_factory=ArmConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    study: StudyConfig = field(default_factory=StudyConfig)


def _run_dir(resume: Optional[str], default: str) -> str:
    """hydra.run.dir: an explicit `runner.resume=PATH` runs in PATH, else the dated default."""
    if resume and resume != "auto":
        if not (Path(resume) / "manifest.json").is_file():
            from atlas_ab import AtlasError

            raise AtlasError(f"cannot resume {resume}: no manifest.json there (not a run directory)")
        return resume
    return default


def _hydra_subdir(resume: Optional[str], output_dir: str) -> str:
    """hydra.output_subdir: `.hydra`, unless the directory already holds a run.

    Resuming must not overwrite the original run's saved config (it is what the
    data was produced with), so a second invocation in the same directory saves
    its own under `.hydra/resume-<time>/`.
    """
    if output_dir and (Path(output_dir) / "manifest.json").exists():
        return ".hydra/resume-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return ".hydra"


def _n_devices() -> int:
    """Local accelerator count (>= 1): the joblib launcher's n_jobs."""
    env = os.environ.get("ATLAS_AB_N_JOBS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    try:
        import torch

        return max(1, torch.cuda.device_count())
    except Exception:  # torch missing or broken: one job
        return 1


def _init_for_path(path: Optional[str]) -> str:
    """model.init for presets: a checkpoint when a path is given, else random weights."""
    return "checkpoint" if path else "random"


def register_resolvers() -> None:
    for name, fn in (("atlas.run_dir", _run_dir), ("atlas.hydra_subdir", _hydra_subdir),
                     ("atlas.n_devices", _n_devices), ("atlas.init_for_path", _init_for_path)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="atlas_schema", node=AppConfig)
    register_resolvers()


register()


def one_line(ex: BaseException) -> Optional[str]:
    """The one-line message for a bad-input exception, or None for anything else (a bug).

    Covers AtlasError, Hydra composition/override errors (unknown arm or group
    option, unknown key, wrong type, missing mandatory value) and OS errors
    (unwritable run directory).
    """
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    from atlas_ab import AtlasError

    def first(s: str) -> str:
        lines = [ln.strip() for ln in str(s).strip().splitlines() if ln.strip()]
        return lines[0] if lines else type(ex).__name__

    if isinstance(ex, AtlasError):
        return " ".join(str(ex).split())
    if isinstance(ex, MissingConfigException):
        missing = getattr(ex, "missing_cfg_file", None) or ""
        options = getattr(ex, "options", None)
        if "/" in str(missing) and options is not None:
            group, name = str(missing).rsplit("/", 1)
            return f"unknown {group} {name!r} (available: {', '.join(sorted(options))})"
        return first(ex)
    if isinstance(ex, (HydraException, OmegaConfBaseException)):
        msg = first(ex)
        cause = ex.__cause__ or ex.__context__
        if isinstance(cause, OmegaConfBaseException):
            c = first(cause)
            full_key = getattr(cause, "full_key", None)
            if full_key and full_key not in c:
                c = f"{c} (key: {full_key})"
            if c not in msg:
                msg = f"{msg}: {c}"
        return msg
    if isinstance(ex, OSError):
        where = ex.filename if ex.filename is not None else ""
        return f"cannot write {where}: {ex.strerror or type(ex).__name__}"
    return None

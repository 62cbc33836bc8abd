"""Hydra's ConfigStore registration, the `atlas.*` resolvers, and the strict key check.

`AppConfig` is the root: `arm`, `model`, `workload`, `runner`, `study`, each a
dataclass from `structured.py`. The primary config (`atlas_ab/conf/config.yaml`)
starts its defaults list with `atlas_schema`, so every group file and every
command-line override is merged onto typed, struct-mode nodes: an unknown key
or a wrong type is an error at composition time, before anything loads.

The group schemas are deliberately NOT stored under the group names (`arm`,
`model`, ...): a ConfigStore entry there would show up as an option, e.g. in
`+arm=glob(*)`.

Struct mode rejects an unknown key given without `+`; one added with `+` (Hydra's
"append", which opens the struct flag) composes silently, so `check_keys` walks the
composed config against the dataclasses and refuses it, naming the nearest valid key.
Also registers the resolvers the Hydra config uses (`atlas.*`), at import; they compute values
and touch nothing (the run directory's lock is the run side's: run/claim.py).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import difflib
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from atlas_ab import AtlasError
from atlas_ab.config import ladder_order
from atlas_ab.config.family_arms import family_arm
from atlas_ab.config.paths import CONF_DIR  # noqa: F401  (the primary config's directory)
from atlas_ab.config.structured import ArmConfig, ModelConfig, RunnerConfig, StudyConfig, WorkloadConfig


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
            raise AtlasError(f"cannot resume {resume}: no manifest.json there (not a run directory)")
        return resume
    return default


def hydra_subdir(resume: Optional[str], output_dir: str) -> str:
    """hydra.output_subdir: `.hydra`, unless the directory already holds a run.

    Resuming must not overwrite the original run's saved config (it is what the
    data was produced with), so a second invocation in the same directory saves
    its own under `.hydra/resume-<time>/`.

    Configuration only names the folder: the run's entry point wraps this resolver to take the
    directory's lock first (run/claim.py `claimed_hydra_subdir`).
    """
    if output_dir and (Path(output_dir) / "manifest.json").exists():
        # the invocation's time, not the resolution's: Hydra resolves this once to create the
        # folder and the session again to find it (and remove it if the resume is refused)
        return ".hydra/resume-" + _INVOKED
    return ".hydra"


_INVOKED = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")


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


def _model_shape(init: str, path: Optional[str], hidden: Optional[int], layers: Optional[int]) -> str:
    """`--help`'s line on the model that will actually load: a checkpoint's own config.json shape."""
    if init == "random":
        return f"random weights, hidden {hidden}, {layers} layers (model.* fields)"
    from atlas_ab.config.paths import resolve_path

    cfg = Path(resolve_path(path) or "") / "config.json"
    try:
        import json

        c = json.loads(cfg.read_text())
        return (f"{path}: {c.get('model_type')} hidden {c.get('hidden_size')}, {c.get('num_hidden_layers')} layers, "
                f"{c.get('num_attention_heads')}/{c.get('num_key_value_heads')} heads, vocab {c.get('vocab_size')}, "
                f"{c.get('num_nextn_predict_layers', 0)} MTP layer(s) (its config.json)")
    except (OSError, ValueError):
        return f"{path}: no readable config.json there"


def _csv(values) -> str:
    """A list as a sweep's comma-separated choices (a study's grid written once, in its own keys)."""
    return ",".join(str(v) for v in values)


def _upto(n: int) -> str:
    """0,1,..,n as a sweep's choices."""
    return ",".join(str(v) for v in range(int(n) + 1))


def _mul(a: int, b: int) -> int:
    return int(a) * int(b)


def register_resolvers() -> None:
    for name, fn in (("atlas.run_dir", _run_dir), ("atlas.hydra_subdir", hydra_subdir),
                     ("atlas.n_devices", _n_devices), ("atlas.model_shape", _model_shape),
                     ("atlas.csv", _csv), ("atlas.upto", _upto), ("atlas.mul", _mul),
                     ("atlas.ladder_slots", ladder_order.slots), ("atlas.ladder_cell", ladder_order.cell),
                     ("atlas.family_at", ladder_order.family_at), ("atlas.last_index", ladder_order.last_index),
                     ("atlas.family_arm", family_arm)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="atlas_schema", node=AppConfig)
    register_resolvers()


register()


GROUPS = {f.name: f.default_factory for f in dataclasses.fields(AppConfig)}


def nearest(key: str, valid) -> str:
    """' (did you mean X?)' for the closest valid name, or '' when none is close."""
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_key(group: Optional[str], key: str) -> str:
    """The one line for an unknown key of a group (or of the top level)."""
    if group is None:
        return f"unknown config group or key {key!r}{nearest(key, GROUPS)}"
    valid = [f.name for f in dataclasses.fields(GROUPS[group]())]
    near = nearest(key, valid)
    if near:
        near = f" (did you mean {group}.{near[len(' (did you mean '):]}"
    return f"unknown key {group}.{key}{near}; valid keys: {', '.join(valid)}"


def check_keys(cfg) -> None:
    """Refuse any key of the composed config that no dataclass declares (`+arm.refeeed=true`)."""
    for top in cfg.keys():
        if top == "hydra":
            continue
        if top not in GROUPS:
            raise AtlasError(unknown_key(None, str(top)))
        valid = {f.name for f in dataclasses.fields(GROUPS[top]())}
        node = cfg[top]
        for key in node.keys():
            if key not in valid:
                raise AtlasError(unknown_key(str(top), str(key)))


_TYPE_WORDS = {bool: "a bool (true or false)", int: "an integer", float: "a number", str: "a string"}


def field_type(group: str, key: str) -> Optional[str]:
    """The expected type of group.key in words (None when it is not a field)."""
    cls = GROUPS.get(group)
    if cls is None:
        return None
    for f in dataclasses.fields(cls()):
        if f.name == key:
            t = typing.get_type_hints(cls).get(key)
            args = [a for a in typing.get_args(t) if a is not type(None)]
            base = args[0] if args else t
            word = _TYPE_WORDS.get(base, getattr(base, "__name__", str(base)))
            return word + (" or null" if type(None) in typing.get_args(t) else "")
    return None

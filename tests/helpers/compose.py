"""The config `python -m atlas_ab OVERRIDES` would run, composed by Hydra as the CLI composes it.

Each distinct list of overrides is composed once per test session and every call gets its own
deep copy: a Hydra compose costs about twice a whole fake-runner run, and many tests compose the
same arm (the copy keeps a test's edits out of the next test's config).
"""
import copy
import functools
from dataclasses import dataclass

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from atlas_ab.config.hydra_schema import CONF_DIR  # (registers the schema)
from atlas_ab.config.structured import ArmConfig, ModelConfig, RunnerConfig, StudyConfig, WorkloadConfig


@dataclass
class Sections:
    """A config's sections built by hand, without Hydra (what run/ladder_grid.check_grid reads)."""
    arm: ArmConfig
    model: ModelConfig
    workload: WorkloadConfig
    runner: RunnerConfig
    study: StudyConfig


@functools.lru_cache(maxsize=None)
def _composed(overrides: tuple[str, ...]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def cfg_of(*overrides: str) -> DictConfig:
    """`compose("config", overrides)`, cached; a composition error is raised each time (not cached)."""
    return copy.deepcopy(_composed(tuple(overrides)))

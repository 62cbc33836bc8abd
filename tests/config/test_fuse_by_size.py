"""runner.fuse_bookkeeping: null compiles the GPU step's bookkeeping only in a run long enough to win the
compile back (config/structured.py FUSE_MIN_STEPS); true / false force it."""
import pytest

from atlas_ab.config.structured import FUSE_MIN_STEPS, RunnerConfig, fuse_for, steps_bound
from atlas_ab.run.session import compose_configs


def test_the_bound_is_one_token_a_step():
    assert steps_bound(waves=1, turns=8, gen_tokens=32) == 256          # the main job
    assert steps_bound(waves=4, turns=8, gen_tokens=32) == 1024


@pytest.mark.parametrize("setting, steps, fused", [
    (None, 256, False),                       # the main job: 15 ms saved for ~0.9-7 s of compile
    (None, FUSE_MIN_STEPS - 1, False),
    (None, FUSE_MIN_STEPS, True),
    (True, 256, True),
    (False, 10 ** 6, False),
])
def test_fuse_for(setting, steps, fused):
    assert fuse_for(RunnerConfig(fuse_bookkeeping=setting), steps) is fused


def test_the_default_is_by_size_and_the_timed_studies_pin_it_on():
    assert compose_configs(["+arm=refeed_on"]).runner.fuse_bookkeeping is None
    assert compose_configs(["+arm=refeed_on", "runner.fuse_bookkeeping=false"]).runner.fuse_bookkeeping is False
    for study in ("ladder", "tree"):
        assert compose_configs([f"+study={study}", "+arm=baseline"]).runner.fuse_bookkeeping is True, study

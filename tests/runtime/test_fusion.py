"""runtime/fusion.py: a `@fused` region is the function itself unless its caller asks for fusion,
and the loop's regions compiled give the loop's rows (here on the CPU, through inductor's C++
backend; the GPU test, tests/run/test_whole_step_graph.py, checks the Triton one in the step's graph)."""
import shutil

import pytest
import torch

from atlas_ab.runtime.fusion import fused


def test_a_region_runs_eagerly_unless_asked():
    calls = []

    @fused
    def region(x, k: int):
        calls.append(k)
        return x + k

    x = torch.arange(3)
    assert region(x, 2).tolist() == [2, 3, 4]
    assert calls == [2] and region.compiled is None       # nothing compiled, torch.compile never touched
    assert region.eager(x, 1).tolist() == [1, 2, 3]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                    reason="inductor's CPU backend needs a C++ compiler")
@pytest.mark.parametrize("name,temperature", [("baseline", None), ("refeed_on", None), ("catchup_on", None),
                                              ("oracle_p2", None), ("shadow_topk_4", None), ("refeed_on", 1.0)],
                         ids=["baseline", "refeed_on", "catchup_on", "oracle_p2", "shadow_topk_4", "refeed_on_t1"])
def test_the_loops_regions_compiled_give_its_rows(name, temperature):
    """Every run-ahead region (the plan, greedy's acceptance, the commit's device half, the read's
    packing, the book) compiled: the same step rows and texts as eager, at static shapes."""
    from atlas_ab.config.structured import SamplingConfig
    from atlas_ab.proposers.mtp_head import MTPProposer
    from atlas_ab.speculative.host_io import pack_read
    from atlas_ab.speculative.loop import Wave
    from atlas_ab.speculative.run_ahead import RunAhead
    from atlas_ab.speculative.sampling import plan_of
    from atlas_ab.speculative.step import DeviceStep
    from atlas_ab.speculative.targets import LiveTarget
    from tests.helpers.tiny import tiny_docs, tiny_models
    from tests.run.test_whole_step_graph import arm_config, assert_same_rows

    trunk, mtp = tiny_models()
    mtp.attach(trunk)
    arm = arm_config(name)
    plan = plan_of(arm, SamplingConfig(temperature=temperature, seed=5)) if temperature else None

    def run(fuse: bool):
        w = Wave(LiveTarget(trunk, graphs=True), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), arm,
                 tiny_docs(n=6, turns=2, chunk=12), 10, sampling=plan)
        assert w.ahead is not None and not w.step.fuse       # the CPU's default: eager
        w.step.fuse = fuse
        if hasattr(w.verifier, "fuse"):
            w.verifier.fuse = fuse
        return w.run()

    assert_same_rows(run(False), run(True))
    for region in (RunAhead.plan, DeviceStep.accept, RunAhead.next_book, pack_read):
        assert region.compiled is not None, region.__name__


def test_a_compiler_that_cannot_build_a_region_is_one_line_naming_the_switch(monkeypatch):
    """Where inductor cannot compile (no compiler, no Triton), the run stops with one line that
    names runner.fuse_bookkeeping, not a compiler's traceback."""
    import torch._dynamo.exc

    from atlas_ab import AtlasError
    from atlas_ab.errors import one_line

    def broken(fn, **kw):
        def run(*a, **k):
            cls = torch._dynamo.exc.BackendCompilerFailed           # (its constructor differs across torch versions)
            e = cls.__new__(cls)
            Exception.__init__(e, "backend='inductor' raised:\nRuntimeError: Failed to find C compiler")
            e.inner_exception = RuntimeError("Failed to find C compiler.\nmore")
            raise e
        return run

    monkeypatch.setattr(torch, "compile", broken)

    @fused
    def region(x):
        return x + 1

    with pytest.raises(AtlasError) as e:
        region(torch.arange(2), fuse=True)
    line = one_line(e.value)
    assert "\n" not in line and "runner.fuse_bookkeeping=false" in line and "region" in line, line
    assert "Failed to find C compiler." in line
    assert region(torch.arange(2)).tolist() == [1, 2]         # eager still works

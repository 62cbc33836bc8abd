"""The GPU path at runner.dtype=float32 (graphs, run-ahead, the compiled bookkeeping, the Triton
forward) gives the CPU's eager fp32 step rows on every arm of the claims study and the tree arms
(their tree attention on the Triton path, their steps captured): the shipped model
through the real Runner, one small live wave each (GPU only). Every integer column (k, accept_len,
drafts, target, committed, gated, oracle, top-k ids, drafter/fed rows) exactly; the drafter's
probabilities (conf, topk_probs) within 1e-4, since the two devices' kernels sum fp32 in other
orders; the events' which-hidden-went-where exactly, their bf16 fingerprints not (a hidden
that rounds across a bf16 boundary flips its hash: docs/telemetry.md, "Replay runs")."""
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from atlas_ab.run.runner import Runner
from atlas_ab.run.session import compose_configs
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.run.test_whole_step_graph import study_arms

WORKLOAD = ["workload.n_docs=4", "workload.turns=2", "workload.gen_tokens=16", "runner.batch_width=4"]


def wave(arm: str, device: str, mode: str = "live", trajectories=None):
    """One wave of `arm`; replay: over a trajectory built on `device` into `trajectories` (the claims
    study's mode: on the GPU its steps captured at static shapes, the CPU's eager at their own)."""
    c = compose_configs([f"+arm={arm}", "runner.dtype=float32", f"runner.mode={mode}",
                         "runner.fuse_bookkeeping=true", f"runner.device={device}",
                         *([f"runner.trajectories={trajectories}", "runner.replay_check_waves=0"]
                           if mode == "replay" else []), *WORKLOAD])
    r = Runner(c.arm, c.model, c.workload, c.runner)
    assert r.info.fused == (device == "cuda" and mode == "live") and r.info.dtype == "float32"
    return r.run_wave(0)


def frame(t: pa.Table) -> pd.DataFrame:
    return t.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


FLOATS = ["conf", "topk_probs"]


def floats(col) -> np.ndarray:
    """A float column or one of (nested) lists of floats, flattened in order, nulls as NaN."""
    out = []

    def walk(v):
        if v is None or (np.isscalar(v) and pd.isna(v)):
            out.append(np.nan)
        elif np.isscalar(v):
            out.append(float(v))
        else:
            for x in v:
                walk(x)
    for v in col:
        walk(v)
    return np.asarray(out, dtype=np.float64)


def assert_same_rows(one, two):
    assert one.steps.num_rows > 0 and one.steps.column_names == two.steps.column_names
    g, c = frame(one.steps), frame(two.steps)
    ints = [n for n in g.columns if n not in FLOATS and n not in TIMING_COLUMNS]
    pd.testing.assert_frame_equal(g[ints], c[ints], check_exact=True)
    for name in FLOATS:
        a, b = floats(g[name]), floats(c[name])
        assert a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4, err_msg=name)
    assert (one.events is None) == (two.events is None)
    if one.events is not None:
        keep = [n for n in one.events.column_names if n not in ("fp", "fp2")]
        pd.testing.assert_frame_equal(frame(one.events)[keep], frame(two.events)[keep], check_exact=True)
    assert one.gate["passed"] and two.gate["passed"] and one.n_tokens == two.n_tokens


def emulate_fp8(arm, monkeypatch):
    """HEAD_FP8 on the GPU runs the real FP8 GEMM, another kernel than the CPU's emulation (its bound:
    tests/proposers/test_drafter_numerics.py); here the GPU emulates, as a device without one does, so
    the rows compare as every other arm's."""
    if arm == "head_fp8":
        monkeypatch.setattr("atlas_ab.proposers.draft_head.real_fp8_matmul", lambda device: False)


@pytest.mark.gpu
@pytest.mark.parametrize("arm", study_arms("claims") + ["tree_top2", "tree_linear2"])
def test_the_gpu_fp32_rows_equal_the_cpus(arm, monkeypatch):
    emulate_fp8(arm, monkeypatch)
    assert_same_rows(wave(arm, "cuda"), wave(arm, "cpu"))


@pytest.mark.gpu
@pytest.mark.parametrize("arm", study_arms("claims"))
def test_the_gpu_fp32_replayed_rows_equal_the_cpus(arm, tmp_path_factory, monkeypatch):
    """The claims study's own mode: each device replays the trajectory it built itself."""
    emulate_fp8(arm, monkeypatch)
    where = {d: tmp_path_factory.getbasetemp() / f"trajectories_{d}" for d in ("cuda", "cpu")}
    assert_same_rows(wave(arm, "cuda", "replay", where["cuda"]), wave(arm, "cpu", "replay", where["cpu"]))


@pytest.mark.slow
def test_the_comparison_passes_a_run_against_itself_and_catches_a_moved_row():
    """The check itself, on the CPU: one arm with top-k probabilities against a second run of it."""
    one, two = wave("shadow_topk_4", "cpu"), wave("shadow_topk_4", "cpu")
    assert_same_rows(one, two)
    moved = two.steps.set_column(two.steps.column_names.index("accept_len"), "accept_len",
                                 pa.array([0] * two.steps.num_rows, two.steps.schema.field("accept_len").type))
    with pytest.raises(AssertionError):
        assert_same_rows(one, type(two)(**{**two.__dict__, "steps": moved}))

"""The run-ahead (speculative/run_ahead.py): the device plans a turn's steps from its own
book and runs them in chunks ahead of the host. It must give exactly the step rows, texts and
fingerprint events of the step-by-step loop, on every arm it takes; refuse the arms it cannot
plan; and fail loud when the device's plan and the host's part. CPU fp32: the static-shape
path runs eagerly here, so both loops run the same kernels on the same shapes (exact equality)."""
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
import yaml
from omegaconf import OmegaConf

from atlas_ab.config.paths import CONF_DIR
from atlas_ab.config.structured import ArmConfig, SamplingConfig
from atlas_ab.proposers.draft_model import DraftModelProposer
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.host_io import first_difference, pack_on_device, pack_plan
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.run_ahead import RunAhead
from atlas_ab.speculative.sampling import plan_of
from atlas_ab.speculative.step_events import Fingerprints
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.speculative.timing import StepTimer
from atlas_ab.telemetry.fingerprint import fingerprint_rows
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.tiny import tiny_docs, tiny_draft, tiny_models

G = 14


@pytest.fixture(scope="module")
def models():
    return tiny_models()


def arm_config(name: str, **over) -> ArmConfig:
    raw = yaml.safe_load((CONF_DIR / "arm" / f"{name}.yaml").read_text())
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ArmConfig), raw, over))


def wave(models, arm, run_ahead, temperature=None, docs=None, proposer=None):
    trunk, mtp = models
    plan = plan_of(arm, SamplingConfig(temperature=temperature, seed=5)) if temperature else None
    prop = proposer or MTPProposer(trunk, mtp, arm.row_space, arm.refeed)
    return Wave(LiveTarget(trunk, graphs=True), prop, arm, docs or tiny_docs(n=6, turns=3, chunk=10), G,
                fingerprint_rows=fingerprint_rows if arm.fingerprints_on else None, sampling=plan, run_ahead=run_ahead)


def _leaf(t: pa.DataType) -> pa.DataType:
    while pa.types.is_list(t):
        t = t.value_type
    return t


def _levels(column: pa.ChunkedArray):
    """A list column's offsets at every level and its leaf values (nulls as NaN)."""
    arr, offsets = column.combine_chunks(), []
    while pa.types.is_list(arr.type):
        offsets.append(arr.offsets.to_numpy())
        arr = arr.flatten()
    return offsets, arr.to_numpy(zero_copy_only=False).astype(np.float64)


def assert_same_rows(a, b) -> None:
    """Two waves' step rows equal in every column, floats (confidences, probabilities, PITs) bit
    for bit: both loops run the same kernels on the same shapes (a CATCHUP arm's catch-up rows
    at one fixed width in both, `Wave.cu_width`), so this holds on any machine."""
    ta, tb = (t.steps.table().drop_columns(list(TIMING_COLUMNS)) for t in (a, b))
    floats = [f.name for f in ta.schema if pa.types.is_floating(_leaf(f.type))]
    pd.testing.assert_frame_equal(ta.drop_columns(floats).to_pandas(), tb.drop_columns(floats).to_pandas(),
                                  check_exact=True)
    for name in floats:
        (oa, va), (ob, vb) = _levels(ta[name]), _levels(tb[name])
        assert len(oa) == len(ob), name
        for x, y in zip(oa, ob):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(va, vb, err_msg=name)


CLAIMS = yaml.safe_load((CONF_DIR / "study" / "claims.yaml").read_text())["study"]["arms"]
CASES = ([(a, {}, None) for a in CLAIMS]
         + [("k1", {}, None), ("k3", {}, None), ("baseline", {"fingerprints": True}, None),
            ("drafter_prefill_on", {"row_space": "dense", "oracle_p2": True}, None),
            ("refeed_on", {"row_space": "dense"}, None), ("catchup_on", {"num_drafts": 3}, None),
            ("refeed_on", {"num_drafts": 3, "oracle_p2": True, "shadow_topk": 2}, None),
            ("baseline", {}, 1.0), ("baseline", {"draft_policy": "greedy"}, 1.0), ("k3", {"shadow_topk": 2}, 0.7),
            ("refeed_on", {}, 1.0), ("catchup_on", {"draft_policy": "greedy"}, 1.0)])


@pytest.mark.parametrize("name,over,temperature", CASES,
                         ids=[f"{n}{''.join('_' + k for k in o)}{'_t' if t else ''}" for n, o, t in CASES])
def test_run_ahead_gives_the_step_by_step_rows(models, name, over, temperature):
    arm = arm_config(name, **over)
    ahead, stepwise = (wave(models, arm, r, temperature) for r in (True, False))
    assert ahead.ahead is not None and stepwise.ahead is None
    a, b = (w.run() for w in (ahead, stepwise))
    assert_same_rows(a, b)
    assert a.generated == b.generated and a.n_tokens == b.n_tokens
    if temperature:
        np.testing.assert_array_equal(np.concatenate(a.pit), np.concatenate(b.pit))
    if arm.fingerprints_on:
        assert a.events.table().equals(b.events.table())


@pytest.mark.parametrize("name", ["draft_conf_066", "draft_conf_030"])
def test_draft_conf_runs_step_by_step(models, name):
    """Its gate is read by the host between the propose and the verify."""
    assert wave(models, arm_config(name), True).ahead is None


@pytest.mark.parametrize("name,over,temperature", [("refeed_on", {}, None), ("refeed_on", {"row_space": "dense"}, None),
                                                   ("refeed_on", {"draft_policy": "greedy"}, 1.0)],
                         ids=["refeed_on", "refeed_on_dense", "refeed_on_t"])
def test_a_catch_up_wider_than_the_run_aheads_width_halts_and_steps_once(models, name, over, temperature, monkeypatch):
    """Width 1: every step that feeds two rows halts its chunk; the host runs it step by step and
    the next chunk starts from there. The rows stay the step-by-step loop's."""
    arm = arm_config(name, **over)
    stepwise, ahead = wave(models, arm, False, temperature), wave(models, arm, True, temperature)
    # the same shapes in both loops: one row, else the bucket
    stepwise.cu_width = ahead.cu_width = ahead.ahead.cu_width = 1
    stepwise = stepwise.run()
    halts = []
    step = Wave._step
    monkeypatch.setattr(Wave, "_step", lambda self, active: (halts.append(1), step(self, active))[1])
    ahead = ahead.run()
    assert len(halts) >= 3 and (stepwise.steps.table().to_pandas().fed_rows >= 2).sum() >= len(halts)
    assert_same_rows(ahead, stepwise)
    assert ahead.generated == stepwise.generated and ahead.events.table().equals(stepwise.events.table())


def test_a_run_aheads_fingerprint_events_cost_the_host_nothing_per_step(models, monkeypatch):
    """Run ahead, a chunk's feed, propose and ring-write events come from its steps' own outputs
    (`add_steps`), not from the host's per-step recording; the table is the step-by-step loop's."""
    arm = arm_config("refeed_on", fingerprints=True)
    stepwise = wave(models, arm, False).run()
    for name in ("propose_and_feed", "record_propose_and_feed", "ring_writes", "record_ring_writes"):
        monkeypatch.setattr(Fingerprints, name,
                            lambda *a, name=name, **k: pytest.fail(f"{name} ran in a run-ahead step"))
    w = wave(models, arm, True)
    assert w.probe.laid_out
    ahead = w.run()
    assert ahead.events.table().equals(stepwise.events.table())


def test_the_draft_model_and_eager_shapes_run_step_by_step(models):
    arm = ArmConfig(name="dm", proposer="draft_model")
    assert wave(models, arm, True, proposer=DraftModelProposer(tiny_draft(models[0]))).ahead is None
    trunk, mtp = models
    eager = Wave(LiveTarget(trunk), MTPProposer(trunk, mtp, "compact", False), ArmConfig(), tiny_docs(n=2), G)
    assert eager.ahead is None


def test_chunks_run_ahead(models, monkeypatch):
    chunks = []
    launch = RunAhead.launch
    monkeypatch.setattr(RunAhead, "launch", lambda self, M, *a: (chunks.append(M), launch(self, M, *a))[1])
    w = wave(models, arm_config("baseline"), True)
    steps = w.run().steps.table().to_pandas()
    assert chunks[0] == 1                                        # the wave's first step: its warm-up, alone
    assert sum(chunks) >= steps.groupby(["turn", "step"]).ngroups
    assert max(chunks) > 1 and len(chunks) < sum(chunks)
    per_step = steps.dropna(subset=["step_ms"]).groupby(["turn", "step"]).step_ms.first()
    assert (per_step > 0).all() and steps.warmup_ms.notna().sum() == steps[steps.step == 0].turn.eq(0).sum()


def test_steps_launched_past_the_turns_end_change_nothing(models, monkeypatch):
    """A chunk that outruns every sequence's turn: its extra steps are empty (no KV, ring or row
    written, the book unmoved), so the rows are the step-by-step loop's."""
    arm = arm_config("oracle_p2", fingerprints=True)
    stepwise = wave(models, arm, False).run()
    monkeypatch.setattr(RunAhead, "chunk", lambda self, gen, warm, turn_key: self.G if warm else 1)
    ahead = wave(models, arm, True).run()
    assert_same_rows(ahead, stepwise)
    assert ahead.generated == stepwise.generated and ahead.events.table().equals(stepwise.events.table())


@pytest.mark.parametrize("tokens,steps,gen,expect", [
    ([0, 0], [0, 0], [1, 1], 5),          # nothing seen yet: K+1 = 3 tokens a step, ceil(13 / 3)
    ([6, 4], [6, 2], [5, 9], 5),          # the fastest rate seen, 2, over the most left, 14-5: ceil(9 / 2)
    ([5, 5], [5, 5], [1, 3], 13),         # one token a step (random weights): exact
    ([9, 0], [3, 0], [2, 14], 4),         # K+1 a step at most: ceil(12 / 3)
])
def test_chunk_size(models, tokens, steps, gen, expect):
    w = wave(models, arm_config("baseline"), True, docs=tiny_docs(n=2, turns=1, chunk=10))
    ahead = w.ahead
    assert ahead.chunk(np.array(gen), True, None) == 1            # the run-ahead step not seen yet: warm-up
    w.graphs._seen.add(ahead.key(None))
    ahead.seen_tokens, ahead.seen_steps = np.array(tokens), np.array(steps)
    assert ahead.chunk(np.array(gen), False, None) == 1           # the wave's first step: warm-up
    assert ahead.chunk(np.array(gen), True, None) == expect


def test_a_device_plan_unlike_the_hosts_fails_loud(models, monkeypatch):
    orig = MTPProposer.plan_on_device

    def off_by_one(self, rows, positions, active, K, oracle):
        plan = orig(self, rows, positions, active, K, oracle)
        return {**plan, "d_slot": plan["d_slot"] + 1}
    monkeypatch.setattr(MTPProposer, "plan_on_device", off_by_one)
    with pytest.raises(RuntimeError, match="turn 0, step 0 of sequence 0: the device planned d_slot differently"):
        wave(models, arm_config("baseline"), True).run()


def test_a_host_commit_unlike_the_devices_stops_the_wave(models, monkeypatch):
    """The host replays the device's commit; one that commits another token (a host-side bug)
    plans its next step from it and is stopped there, naming what differs."""
    orig, calls = Wave._commit, []

    def other_token(self, h, vh, n, active):
        calls.append(1)
        if len(calls) == 3:
            h.target[1, 0] += 1
        return orig(self, h, vh, n, active)
    monkeypatch.setattr(Wave, "_commit", other_token)
    with pytest.raises(RuntimeError, match="sequence 1: the device planned (last_tok|cu_tok) differently"):
        wave(models, arm_config("refeed_on"), True).run()


def test_pack_on_device_lays_out_as_pack_plan():
    arrays = {"last_tok": np.array([7, 9]), "pos": np.array([[3, 4, 5], [8, 9, 10]]), "left": np.array([2, 0])}
    x, layout = pack_plan(**arrays)
    xd, layout_d = pack_on_device(**{k: torch.as_tensor(v, dtype=torch.int32) for k, v in arrays.items()})
    assert layout_d == layout == (("last_tok", ()), ("pos", (3,)), ("left", ()))
    assert xd.dtype == torch.long
    np.testing.assert_array_equal(xd.numpy(), x)
    assert x.tolist() == [[7, 3, 4, 5, 2], [9, 8, 9, 10, 0]]
    assert first_difference(x, x.copy(), layout) is None
    y = x.copy()
    y[1, 3] = 11
    assert first_difference(x, y, layout) == ("pos", 1)


def test_a_chunks_steps_share_its_mean_time():
    clock = iter([0.0, 0.012, 1.0, 1.03]).__next__
    t = StepTimer(live=True, clock=clock, first_calls=lambda: 0)
    t.start()
    ms, warm = t.stop("verify", 1)                  # the wave's first step: warm-up
    assert np.isnan(ms) and warm == pytest.approx(12.0, abs=1e-9)
    t.start()
    ms, warm = t.stop("verify", 3)
    assert ms == pytest.approx(10.0, abs=1e-9) and np.isnan(warm)


def test_the_plan_check_names_the_first_array_and_sequence_that_differ(models):
    """`RunAhead.check`, the host/device agreement: equal plans pass; a value or a layout that
    differs stops the wave naming it."""
    ahead = wave(models, arm_config("baseline"), True, docs=tiny_docs(n=2, turns=1, chunk=10)).ahead
    x, layout = pack_plan(last_tok=np.array([7, 9]), pos=np.array([[3, 4, 5], [8, 9, 10]]), left=np.array([2, 0]))
    ahead.plan_layout = layout
    ahead.check(x, layout, x.copy(), lambda s: f"sequence {s}")
    y = x.copy()
    y[1, 2] += 1
    with pytest.raises(RuntimeError, match="^run-ahead: sequence 1: the device planned pos differently from the host$"):
        ahead.check(x, layout, y, lambda s: f"sequence {s}")
    ahead.plan_layout = layout[:2]
    with pytest.raises(RuntimeError, match="sequence 0: the device planned layout differently"):
        ahead.check(x, layout, x.copy(), lambda s: f"sequence {s}")


def test_the_step_its_run_ahead_and_its_events_import_without_the_loop():
    """The device step, the run-ahead and the FINGERPRINTS recorder are handed what they need:
    none of them imports the wave (no circle between the loop's parts)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    code = ("import sys; import atlas_ab.speculative.step, atlas_ab.speculative.run_ahead, "
            "atlas_ab.speculative.step_events, atlas_ab.speculative.step_table; "
            "print('atlas_ab.speculative.loop' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "False"

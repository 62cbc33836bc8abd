"""The EAGLE-3 drafter in the loop on CPU fp32: lossless (the gate, K in {1, 2, 3}, B in {1, 4}), static
shapes == dynamic ones, and replay over a trajectory that stores its features == live.

Its tiny target has three layers (tests/helpers/tiny.py, `tiny_eagle3`), so the replay tests of
test_replay.py (whose one-layer target and one stored trajectory every other arm shares) are
repeated here with this family's own trajectory; what is guaranteed is the same as there."""
import numpy as np
import pandas as pd
import pytest

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.eagle3 import EAGLE3Proposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.lossless_gate import check
from atlas_ab.speculative.replay_check import compare_live, replay_gate
from atlas_ab.speculative.targets import LiveTarget, ReplayTarget
from atlas_ab.speculative.trajectory import EXTEND, greedy
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.replay_tools import REPLAY_B, REPLAY_G, tables
from tests.helpers.steps import assert_steps_match
from tests.helpers.tiny import tiny_docs, tiny_eagle3

pytestmark = pytest.mark.float_sensitive

G = 8
ARMS = {
    "k3": ArmConfig(name="eagle3_k3", proposer="eagle3", num_drafts=3),
    # vLLM's EAGLE-3 feeds every verified position's features to the drafter: CATCHUP + REFEED
    "refeed": ArmConfig(name="eagle3_refeed", proposer="eagle3", num_drafts=3, catchup=True, refeed=True,
                        drafter_prefill=True, ring_prefill=True, shadow_topk=2, fingerprints=True),
    "dense_conf": ArmConfig(name="eagle3_dense_conf", proposer="eagle3", row_space="dense", draft_conf=0.5,
                            catchup=True, num_drafts=2),
}


@pytest.fixture(scope="module")
def models():
    return tiny_eagle3()


def wave(models, arm, docs, target=None, graphs=False, G=G):
    trunk, head = models
    prop = EAGLE3Proposer(trunk, head, arm.row_space, arm.refeed)
    t = target if target is not None else LiveTarget(trunk, graphs, features=prop.feature_layers)
    return Wave(t, prop, arm, docs, G).run()


@pytest.mark.parametrize("B", [1, 4])
@pytest.mark.parametrize("K", [1, 2, 3])
def test_lossless_gate(models, B, K):
    docs = tiny_docs(n=B, turns=2, chunk=10)
    trace = wave(models, ArmConfig(name=f"eagle3_k{K}", proposer="eagle3", num_drafts=K), docs)
    gate = check(models[0], docs, trace.generated, G, list(range(B)))
    assert gate.passed and gate.divergences == 0 and gate.checked_tokens == B * 2 * G
    steps = trace.steps.table().to_pandas()
    assert (steps.accept_len <= steps.k).all() and (steps.k == K).all()
    per_turn = steps.groupby(["doc_id", "turn"]).committed.apply(lambda c: sum(map(len, c)))
    assert (per_turn == G - 1).all()


def test_the_head_gets_drafts_accepted_at_every_depth(models):
    steps = wave(models, ARMS["refeed"], tiny_docs(n=4, turns=3, chunk=12)).steps.table().to_pandas()
    assert set(steps.accept_len) >= {0, 1, 3}, steps.accept_len.value_counts().to_dict()


@pytest.mark.parametrize("name", sorted(ARMS))
def test_static_shape_steps_match_dynamic_ones(models, name):
    docs = tiny_docs(n=3, turns=2, chunk=10)
    dyn, sta = (wave(models, ARMS[name], docs, graphs=g).steps.table() for g in (False, True))
    assert_steps_match(dyn, sta, skip=TIMING_COLUMNS)


@pytest.fixture(scope="module")
def docs():
    return tiny_docs(n=REPLAY_B, turns=3, chunk=12)


@pytest.fixture(scope="module")
def stored(models, docs):
    """The target-only greedy trajectory, keeping the EAGLE-3 features (three layers' streams)."""
    return greedy(models[0], docs, REPLAY_G, extend=EXTEND, keep_hiddens=True, features=models[1].layers)


def test_the_trajectory_keeps_the_features(models, docs, stored):
    trunk, head = models
    assert stored.hiddens.shape[-1] == 3 * trunk.args.hidden_size
    plain = greedy(trunk, docs, REPLAY_G, extend=EXTEND, keep_hiddens=True)
    assert stored.generated() == plain.generated() and np.array_equal(stored.ext, plain.ext)
    # the last feature layer is the trunk's output: the plain trajectory's hidden, to fp32 rounding
    H = trunk.args.hidden_size
    n = stored.tokens >= 0
    assert np.allclose(stored.hiddens[..., 2 * H:][n].numpy(), plain.hiddens[n].numpy(), atol=1e-5)


@pytest.mark.parametrize("name", sorted(ARMS))
def test_replay_of_the_stored_trajectory_equals_live(models, docs, stored, name):
    """Every discrete column and the committed text equal live mode's; the head's probabilities to
    fp32 rounding (the stored features come from one-token forwards, live ones from the verify)."""
    arm = ARMS[name]
    live_trace = wave(models, arm, docs, G=REPLAY_G)
    rep_trace = wave(models, arm, docs, target=ReplayTarget(stored, "cpu"), G=REPLAY_G)
    live, live_ev = tables(live_trace)
    rep, rep_ev = tables(rep_trace)
    assert live_trace.generated == rep_trace.generated
    assert_steps_match(live, rep, skip=(*TIMING_COLUMNS, "target"))
    known = lambda s: s.apply(lambda r: list(r.target[:r.accept_len + 1]), axis=1)  # noqa: E731
    assert (known(live) == known(rep)).all()
    if live_ev is not None:
        same = [c for c in live_ev.columns if c not in ("fp", "fp2")]
        pd.testing.assert_frame_equal(live_ev[same], rep_ev[same])
    gate = replay_gate(stored, rep_trace.generated)
    assert gate["passed"] and gate["checked_tokens"] == REPLAY_B * 3 * REPLAY_G
    c = compare_live(stored, rep_trace.steps.table(), live_trace.steps.table(), live_trace.generated)
    assert (c["rows_matched"], c["rows_differ"], c["trajectories_left"]) == (len(live), 0, 0)


@pytest.mark.parametrize("name", ["k3", "refeed"])
def test_run_ahead_gives_the_step_by_step_rows(models, name):
    """It plans on the device as the MTP head does (DevicePlanner, inherited): at static shapes the
    wave runs ahead of the host and gives the step-by-step wave's rows, floats bit for bit."""
    from tests.speculative.test_run_ahead import assert_same_rows
    trunk, head = models
    arm, docs = ARMS[name], tiny_docs(n=4, turns=3, chunk=10)
    waves = []
    for r in (True, False):
        prop = EAGLE3Proposer(trunk, head, arm.row_space, arm.refeed)
        waves.append(Wave(LiveTarget(trunk, graphs=True, features=prop.feature_layers), prop, arm, docs, G,
                          run_ahead=r))
    assert waves[0].ahead is not None and waves[1].ahead is None
    a, b = (w.run() for w in waves)
    assert_same_rows(a, b)
    assert a.generated == b.generated

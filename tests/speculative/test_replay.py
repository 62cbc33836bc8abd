"""Replay mode on CPU fp32: every arm replays the one stored target-only greedy trajectory
and its steps are live mode's, lever by lever, in both row spaces and for both proposers."""
import numpy as np
import pandas as pd
import pytest
import torch

from atlas_ab.analysis.coverage import topk_coverage
from atlas_ab.analysis.fingerprints import fingerprint_table
from atlas_ab.config.structured import ArmConfig
from atlas_ab.speculative.gate import replay_greedy
from atlas_ab.speculative.replay_check import compare_live, replay_gate
from atlas_ab.speculative.targets import UNKNOWN
from atlas_ab.speculative.trajectory import EXTEND, greedy
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.replay_tools import RecordingTarget, harvest, replay_target, run
from tests.helpers.tiny import tiny_docs, tiny_draft, tiny_models

G = 10
B = 4

ARMS = {
    "baseline": ArmConfig(name="baseline"),
    "k1": ArmConfig(name="k1", num_drafts=1),
    "k3": ArmConfig(name="k3", num_drafts=3),
    "catchup_on": ArmConfig(name="catchup_on", catchup=True),
    "refeed_on": ArmConfig(name="refeed_on", catchup=True, refeed=True),
    "shift_m1": ArmConfig(name="shift_m1", catchup=True, refeed=True, refeed_shift=-1),
    "shift_p1": ArmConfig(name="shift_p1", catchup=True, refeed=True, refeed_shift=1),
    "ring_prefill_on": ArmConfig(name="ring_prefill_on", catchup=True, ring_prefill=True),
    "refeed_ring_prefill": ArmConfig(name="refeed_ring_prefill", catchup=True, refeed=True, ring_prefill=True,
                                     num_drafts=3),
    "drafter_prefill_on": ArmConfig(name="drafter_prefill_on", drafter_prefill=True, catchup=True,
                                    fingerprints=True),
    "draft_conf_099": ArmConfig(name="draft_conf_099", draft_conf=0.99, catchup=True),
    "draft_conf_050": ArmConfig(name="draft_conf_050", draft_conf=0.5, catchup=True, refeed=True),
    "shadow_topk_4": ArmConfig(name="shadow_topk_4", shadow_topk=4, num_drafts=3),
    "oracle_p2": ArmConfig(name="oracle_p2", oracle_p2=True, catchup=True, refeed=True),
    "dense": ArmConfig(name="dense", row_space="dense"),
    "dense_refeed_k3": ArmConfig(name="dense_refeed_k3", row_space="dense", catchup=True, refeed=True,
                                 num_drafts=3, ring_prefill=True),
    "dense_prefill_k1": ArmConfig(name="dense_prefill_k1", row_space="dense", drafter_prefill=True,
                                  num_drafts=1, oracle_p2=False, fingerprints=True),
    "dense_conf_oracle": ArmConfig(name="dense_conf_oracle", row_space="dense", draft_conf=0.5, catchup=True,
                                   oracle_p2=True, shadow_topk=2),
    "draft_model_k1": ArmConfig(name="draft_model_k1", proposer="draft_model", num_drafts=1),
    "draft_model_k3": ArmConfig(name="draft_model_k3", proposer="draft_model", num_drafts=3, shadow_topk=2),
}
FLOATS = ["conf", "topk_probs"]


@pytest.fixture(scope="module")
def models():
    return tiny_models()


@pytest.fixture(scope="module")
def draft(models):
    return tiny_draft(models[0])


@pytest.fixture(scope="module")
def docs():
    return tiny_docs(n=B, turns=3, chunk=12)


@pytest.fixture(scope="module")
def stored(models, docs):
    """The one trajectory every arm replays (as a sweep shares it)."""
    return greedy(models[0], docs, G, extend=EXTEND, keep_hiddens=True)


def known_target(steps):
    """`target` up to the bonus (depth accept_len): the part replay can know."""
    return steps.apply(lambda r: list(r.target[:r.accept_len + 1]), axis=1)


def assert_steps_equal(live, rep, exact_floats):
    assert len(live) == len(rep) and len(live) > 0
    # replay writes UNKNOWN past the bonus, and only there
    tail = rep.apply(lambda r: list(r.target[r.accept_len + 1:]), axis=1)
    assert tail.map(lambda x: all(v == UNKNOWN for v in x)).all()
    assert (rep.target.map(len) == live.target.map(len)).all()
    assert (known_target(live) == known_target(rep)).all()
    assert rep[list(TIMING_COLUMNS)].isna().all().all()
    assert (live.step_ms.notna() != live.warmup_ms.notna()).all()     # each live step timed one way
    same = [c for c in live.columns if c not in (*TIMING_COLUMNS, "target", *FLOATS)]
    pd.testing.assert_frame_equal(live[same], rep[same])
    for c in FLOATS:
        a, b = live[c].dropna(), rep[c].dropna()
        assert len(a) == len(b)
        if len(a):
            a, b = np.array(a.map(np.concatenate if c == "topk_probs" else np.asarray).tolist()), \
                np.array(b.map(np.concatenate if c == "topk_probs" else np.asarray).tolist())
            if exact_floats:
                assert np.array_equal(a, b), c
            else:
                assert np.allclose(a, b, rtol=0, atol=1e-5), (c, np.abs(a - b).max())


@pytest.mark.parametrize("name", sorted(ARMS))
def test_replay_of_the_live_runs_own_target_is_bit_identical(models, draft, docs, name):
    """The state machine: fed the very hiddens and argmaxes its live run computed, replay
    gives the same steps and events, floats and fingerprints included, bit for bit."""
    arm = ARMS[name]
    rec = RecordingTarget(models[0])
    live, live_ev, _, wave = run(models, arm, docs, G, target=rec, draft=draft)
    traj = harvest(rec, wave, G, EXTEND)
    rep, rep_ev, trace, _ = run(models, arm, docs, G, target=replay_target(traj), draft=draft)
    assert_steps_equal(live, rep, exact_floats=True)
    if live_ev is not None:
        pd.testing.assert_frame_equal(live_ev, rep_ev)
    assert replay_gate(traj, trace.generated)["passed"]


@pytest.mark.parametrize("name", sorted(ARMS))
def test_replay_of_the_stored_trajectory_equals_live(models, draft, docs, stored, name):
    """Every arm over the one built trajectory: all integer columns (drafts, accept_len,
    positions, rows, gating, oracle hits, top-k ids, commits) and the events table
    (fingerprints included) equal live mode's exactly. The MTP drafter's probabilities agree
    to 1e-5, not bit for bit: the stored hiddens come from one-token forwards, the live ones
    from the K+1-row verify, and fp32 rounds those differently in the last bits (so a
    fingerprint, taken over the BF16 rounding, could in principle flip: 0 of 3,573 did)."""
    arm = ARMS[name]
    live, live_ev, live_trace, _ = run(models, arm, docs, G, draft=draft)
    rep, rep_ev, trace, _ = run(models, arm, docs, G, target=replay_target(stored), draft=draft)
    assert_steps_equal(live, rep, exact_floats=arm.proposer == "draft_model")
    if live_ev is not None:
        pd.testing.assert_frame_equal(live_ev, rep_ev)
        tl, tr = fingerprint_table(live_ev, arm.row_space), fingerprint_table(rep_ev, arm.row_space)
        assert [(r.matched, r.checked) for r in tl.rows] == [(r.matched, r.checked) for r in tr.rows]
        assert tr.ok == (arm.refeed_shift == 0)        # a shifted label fails row e, in both modes
    if arm.shadow_topk:      # SHADOW_TOPK's coverage reads target[:accept_len + 1] only
        assert topk_coverage(live, name) == topk_coverage(rep, name)
    gate = replay_gate(stored, trace.generated)
    assert gate["passed"] and gate["by"] == "replay" and gate["checked_tokens"] == B * 3 * G
    assert live_trace.generated == trace.generated
    c = compare_live(stored, trace.steps.table(), live_trace.steps.table(), live_trace.generated)
    assert (c["rows_matched"], c["rows_differ"], c["trajectories_left"]) == (len(live), 0, 0)


def test_the_builder_is_the_gates_greedy_decode(models, docs, stored):
    """The stored text is what the lossless gate replays; the continuation past each turn's
    end is the greedy decode's own next tokens, and it leaves the next turn untouched."""
    ref = replay_greedy(models[0], docs, G)
    assert stored.generated() == ref.tokens.tolist()
    one_turn = [d.__class__(d.doc_id, d.name, d.chunks[:1]) for d in docs]
    longer = greedy(models[0], one_turn, G + EXTEND)
    assert (stored.ext[:, 0, :] == np.array([g[0][G:] for g in longer.generated()])).all()
    # the hidden of every position is the trunk's pre-norm output over the committed text
    for b in range(B):
        n = int((stored.tokens[b] >= 0).sum())
        ref = models[0].forward_train(torch.as_tensor(stored.tokens[b:b + 1, :n].astype(np.int64)))[0]
        assert torch.allclose(stored.hiddens[b, :n], ref, atol=1e-5)
    # argmax at every generated position but a turn's last is the next committed token
    for b in range(B):
        for t, s in enumerate(stored.gen_start[b]):
            assert (stored.argmax[b, s - 1:s + G - 1] == stored.tokens[b, s:s + G]).all()
            assert stored.argmax[b, s + G - 1] == stored.ext[b, t, 0]


def test_a_replay_that_commits_other_text_fails_its_gate(models, docs, stored):
    _, _, trace, _ = run(models, ARMS["baseline"], docs, G, target=replay_target(stored))
    trace.generated[2][1][4] += 1
    gate = replay_gate(stored, trace.generated)
    assert not gate["passed"] and gate["first_divergence"]["doc_id"] == 2
    assert (gate["first_divergence"]["turn"], gate["first_divergence"]["token"]) == (1, 4)


def test_replay_refuses_a_trajectory_of_other_documents(models, stored):
    from atlas_ab import AtlasError
    other = tiny_docs(n=B, turns=3, chunk=12, seed=5)
    with pytest.raises(AtlasError, match="not the stored trajectory"):
        run(models, ARMS["baseline"], other, G, target=replay_target(stored))


def test_a_drifted_live_run_is_counted(models, docs, stored):
    """compare_live counts the sequences whose live text left the stored one and the rows
    that differ (what bf16 near-ties do on the GPU), here forced by editing the stored text."""
    _, _, live_trace, _ = run(models, ARMS["baseline"], docs, G)
    rep, _, trace, _ = run(models, ARMS["baseline"], docs, G, target=replay_target(stored))
    bent = [[list(t) for t in s] for s in live_trace.generated]
    bent[1][2][3] += 1
    c = compare_live(stored, trace.steps.table(), live_trace.steps.table(), bent)
    assert c["trajectories_left"] == 1 and c["departures"][0]["doc_id"] == 1
    assert c["rows_matched_same_context"] == (rep.doc_id != 1).sum() + ((rep.doc_id == 1) & (rep.turn < 2)).sum()

"""Replay mode on CPU fp32: every arm replays the one stored target-only greedy trajectory
and its steps are live mode's, lever by lever, in both row spaces and for both proposers.

What is guaranteed, on any x86-64 CPU and thread count: the discrete outcomes (tokens, drafts,
accept lengths, rows, events' labels and keys) are equal. The hidden rows are not: the stored ones
come from one-token forwards, the live ones from the K+1-row verify, and a GEMM rounds other
shapes differently (an AVX2 CPU's kernels more than this one's), so they agree to fp32 rounding,
and a fingerprint (FNV over the row's BF16 rounding) may flip where a value sits on a BF16
rounding boundary. Bit for bit only where the same kernel computed the same shape: a replay over
the live run's own target outputs."""
import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from atlas_ab.analysis.fingerprints import fingerprint_table
from atlas_ab.analysis.tree import topk_coverage
from atlas_ab.config.structured import ArmConfig
from atlas_ab.speculative.replay_check import compare_live, replay_gate
from atlas_ab.speculative.targets import UNKNOWN
from atlas_ab.speculative.trajectory import EXTEND, Trajectory, greedy
from atlas_ab.telemetry.fingerprint import fingerprint_rows
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.replay_tools import (
    REPLAY_B,
    REPLAY_G,
    WEIGHTLESS,
    HashedRows,
    RecordingTarget,
    harvest,
    replay_target,
    run,
)
from tests.helpers.steps import FLOAT_ATOL, assert_steps_match, lossy_variants
from tests.helpers.tiny import tiny_docs, tiny_draft

pytestmark = pytest.mark.float_sensitive

G, B = REPLAY_G, REPLAY_B

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
    **{f: ArmConfig(name=f, proposer=f, num_drafts=3, **levers) for f, levers in WEIGHTLESS.items()},
}
# The fast tier replays the compound arms, which between them turn on every lever and both row spaces and
# proposers; the arms of one lever each (whose levers those cover) run in the whole suite.
SINGLE = {"k1", "k3", "catchup_on", "refeed_on", "shift_p1", "ring_prefill_on", "draft_conf_099", "dense",
          "draft_model_k1"}
ARM_PARAMS = [pytest.param(n, marks=pytest.mark.slow) if n in SINGLE else n for n in sorted(ARMS)]
FLOATS = ["conf", "topk_probs"]
FINGERPRINTS = ["fp", "fp2"]
# fp32 hiddens of other shapes: rounding grows with the value (the trunk's residual stream reaches ~20)
HIDDEN_TOL = dict(atol=FLOAT_ATOL, rtol=FLOAT_ATOL)
# a hashed row is the BF16 rounding of such a hidden: at most one BF16 step (2^-7 relative) apart
BF16_STEP = dict(atol=FLOAT_ATOL, rtol=2.0 ** -7)


@pytest.fixture(scope="module")
def draft(models):
    return tiny_draft(models[0])


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
                assert np.allclose(a, b, rtol=0, atol=FLOAT_ATOL), (c, np.abs(a - b).max())


def assert_events_match(live_ev, rep_ev, live_rows: torch.Tensor, rep_rows: torch.Tensor):
    """Events of a live and a replayed run whose hiddens came from forwards of other shapes: which
    hidden went where (kinds, labels, keys, RoPE, slots, positions) exactly; the hashed BF16 rows
    within one rounding step; and the fingerprints equal wherever their rows are bit-identical."""
    same = [c for c in live_ev.columns if c not in FINGERPRINTS]
    pd.testing.assert_frame_equal(live_ev[same], rep_ev[same])
    assert (live_ev.fp2.isna() == rep_ev.fp2.isna()).all()
    assert live_rows.shape == rep_rows.shape and live_rows.dtype == rep_rows.dtype == torch.bfloat16
    torch.testing.assert_close(rep_rows.float(), live_rows.float(), **BF16_STEP)
    n = len(live_ev)                # the fp rows come first, in table order (telemetry/events.py)
    bits_same = (live_rows[:n].view(torch.int16) == rep_rows[:n].view(torch.int16)).all(-1).numpy()
    fp_live, fp_rep = live_ev.fp.astype("int64").to_numpy(), rep_ev.fp.astype("int64").to_numpy()
    assert (fp_live[bits_same] == fp_rep[bits_same]).all()
    assert (fp_live[~bits_same] != fp_rep[~bits_same]).all()


def assert_hiddens_close(live: Trajectory, stored: Trajectory):
    """The hidden of every position the live verify computed on the committed path equals the stored
    one-token forward's to fp32 rounding."""
    L = live.hiddens.shape[1]
    got, want = live.hiddens, stored.hiddens[:, :L]
    seen = ~torch.isnan(got).any(-1)
    assert seen.sum() > 0
    torch.testing.assert_close(got[seen], want[seen], **HIDDEN_TOL)


@pytest.fixture(scope="module")
def lives(models, draft, docs):
    """Each arm's live run, once for the module (both replay tests compare with it): its steps,
    events and trace, the trajectory its own target computed, and the rows its fingerprints hashed."""
    cache = {}

    def live(name):
        if name not in cache:
            rec, rows = RecordingTarget(models[0]), HashedRows()
            steps, ev, trace, wave = run(models, ARMS[name], docs, G, target=rec, draft=draft, hasher=rows)
            cache[name] = dict(live=steps, live_ev=ev, live_trace=trace, own=harvest(rec, wave, G, EXTEND),
                               live_rows=rows.rows if ev is not None else None)
        return cache[name]
    return live


@pytest.mark.parametrize("name", ARM_PARAMS)
def test_replay_of_the_live_runs_own_target_is_bit_identical(models, draft, docs, lives, name):
    """The state machine: fed the very hiddens and argmaxes its live run computed, replay
    gives the same steps and events, floats and fingerprints included, bit for bit."""
    arm, lv = ARMS[name], lives(name)
    traj = lv["own"]
    rep, rep_ev, trace, _ = run(models, arm, docs, G, target=replay_target(traj), draft=draft)
    # bit for bit: the drafter is handed the very tensors live computed, and runs the same shapes on them
    assert_steps_equal(lv["live"], rep, exact_floats=True)
    if lv["live_ev"] is not None:
        pd.testing.assert_frame_equal(lv["live_ev"], rep_ev)
    assert replay_gate(traj, trace.generated)["passed"]


def replayed(models, draft, docs, lives, name, stored):
    """`name`'s live run and its replay over `stored`, keeping the rows the replay's fingerprints hashed."""
    rows = HashedRows()
    rep, rep_ev, trace, _ = run(models, ARMS[name], docs, G, target=replay_target(stored), draft=draft, hasher=rows)
    return dict(lives(name), rep=rep, rep_ev=rep_ev, trace=trace, rep_rows=rows.rows if rep_ev is not None else None)


@pytest.mark.parametrize("name", ARM_PARAMS)
def test_replay_of_the_stored_trajectory_equals_live(models, draft, docs, stored, lives, name):
    """Every arm over the one built trajectory: all integer columns (drafts, accept_len,
    positions, rows, gating, oracle hits, top-k ids, commits) and the events' bookkeeping equal
    live mode's exactly. The hiddens, the MTP drafter's probabilities and the fingerprinted BF16
    rows only to rounding (the module docstring says why): the stored hiddens come from one-token
    forwards, the live ones from the K+1-row verify."""
    arm = ARMS[name]
    both = replayed(models, draft, docs, lives, name, stored)
    live, rep, live_ev, rep_ev, trace = both["live"], both["rep"], both["live_ev"], both["rep_ev"], both["trace"]
    # the draft model reads tokens only: the same kernels on the same shapes in both modes, bit for bit
    assert_steps_equal(live, rep, exact_floats=arm.proposer == "draft_model" or arm.proposer in WEIGHTLESS)
    assert_hiddens_close(both["own"], stored)
    if live_ev is not None:
        assert_events_match(live_ev, rep_ev, both["live_rows"], both["rep_rows"])
        # the table's checks compare each run's own copies of one hidden: equal counts in both modes
        tl, tr = fingerprint_table(live_ev, arm.row_space), fingerprint_table(rep_ev, arm.row_space)
        assert [(r.matched, r.checked) for r in tl.rows] == [(r.matched, r.checked) for r in tr.rows]
        assert tr.ok == (arm.refeed_shift == 0)        # a shifted label fails row e, in both modes
    if arm.shadow_topk:      # SHADOW_TOPK's coverage reads target[:accept_len + 1] only
        assert topk_coverage(live, name) == topk_coverage(rep, name)
    gate = replay_gate(stored, trace.generated)
    assert gate["passed"] and gate["by"] == "replay" and gate["checked_tokens"] == B * 3 * G
    live_trace = both["live_trace"]
    assert live_trace.generated == trace.generated
    c = compare_live(stored, trace.steps.table(), live_trace.steps.table(), live_trace.generated)
    assert (c["rows_matched"], c["rows_differ"], c["trajectories_left"]) == (len(live), 0, 0)


@pytest.mark.parametrize("name", ARM_PARAMS)
def test_a_replay_at_static_shapes_gives_the_dynamic_replays_steps(models, draft, docs, stored, name):
    """On a GPU with CUDA graphs a replay runs its steps at static shapes, one graph per shape, the
    turn read from the device (`ReplayTarget(graphs=True)`); on the CPU that same static path runs
    eagerly and gives the dynamic replay's steps and events: every discrete column exactly, the
    floats (the drafter's probabilities over a longer KV read) to fp32 rounding."""
    from atlas_ab.speculative.targets import ReplayTarget
    arm = ARMS[name]
    dyn, dyn_ev, dyn_trace, _ = run(models, arm, docs, G, target=ReplayTarget(stored, "cpu"), draft=draft)
    sta, sta_ev, sta_trace, wave = run(models, arm, docs, G, target=ReplayTarget(stored, "cpu", graphs=True),
                                       draft=draft)
    assert wave.graphs.static and sta_trace.generated == dyn_trace.generated
    assert_steps_match(dyn, sta, skip=TIMING_COLUMNS)
    if dyn_ev is not None:
        same = [c for c in dyn_ev.columns if c not in FINGERPRINTS]
        pd.testing.assert_frame_equal(dyn_ev[same], sta_ev[same])
    assert replay_gate(stored, sta_trace.generated)["passed"]


def test_the_comparison_passes_other_rounding_and_fails_a_lossy_change(models, draft, docs, stored, lives):
    """The test above has teeth and no more: stored hiddens nudged by ~8 fp32 ulps (another CPU's
    GEMM rounding, larger than the live-vs-stored gap here) replay to the same steps, and a hashed
    row one BF16 step off (a flipped fingerprint) passes; a dropped accepted token, a wrong draft,
    a lost step, a hashed row of another hidden, or a hidden off by more than rounding fail it."""
    nudged = dataclasses.replace(stored, hiddens=stored.hiddens * (1 + 2.0 ** -20))
    both = replayed(models, draft, docs, lives, "refeed_on", nudged)
    live, rep, live_ev, rep_ev = both["live"], both["rep"], both["live_ev"], both["rep_ev"]
    live_rows, rep_rows = both["live_rows"], both["rep_rows"]
    assert_steps_equal(live, rep, exact_floats=False)
    assert_hiddens_close(both["own"], nudged)
    assert_events_match(live_ev, rep_ev, live_rows, rep_rows)
    flipped = rep_rows.clone()
    flipped.view(torch.int16)[0, 0] += 1            # one BF16 step: what a rounding boundary does
    flipped_ev = rep_ev.assign(fp=fingerprint_rows(flipped[:len(rep_ev)]).numpy())
    assert (flipped_ev.fp != rep_ev.fp).sum() == 1   # a flipped fingerprint: a bit-exact check fails here
    assert_events_match(live_ev, flipped_ev, live_rows, flipped)
    for what, bad in lossy_variants(rep):
        with pytest.raises(AssertionError):
            assert_steps_equal(live, bad, exact_floats=False)
            pytest.fail(what)
    with pytest.raises(AssertionError):             # a row of another hidden hashed
        assert_events_match(live_ev, rep_ev, live_rows, rep_rows.roll(1, dims=0))
    with pytest.raises(AssertionError):             # the stored hiddens off by 1e-3: more than rounding
        assert_hiddens_close(both["own"], dataclasses.replace(stored, hiddens=stored.hiddens + 1e-3))


def test_the_builder_is_the_greedy_decode(models, docs, stored):
    """The stored text is target-only greedy text (what the lossless gate accepts); the continuation
    past each turn's end is the greedy decode's own next tokens, and it leaves the next turn untouched."""
    assert stored.generated() == greedy(models[0], docs, G).generated()
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


def test_turn_margins_are_the_margins_before_each_generated_token(stored):
    """`Trajectory.turn_margins` (scripts/llamacpp_compare.py reads it) is margins[b, gen_start - 1 + g]:
    the position replay_check reads a departure's margins from."""
    m = stored.turn_margins()
    for b in range(B):
        for t, s in enumerate(stored.gen_start[b]):
            assert m[b][t] == [tuple(float(v) for v in stored.margins[b, s - 1 + g]) for g in range(G)]


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
    d, at = c["departures"][0], stored.gen_start[1][2] - 1 + 3      # the argmax that chose turn 2's token 3
    assert (d["turn"], d["token"], d["margin"]) == (2, 3, float(stored.margins[1, at, 0]))
    assert d["relative_margin"] == float(stored.margins[1, at, 0]) / max(1.0, abs(float(stored.margins[1, at, 1])))
    assert c["rows_matched_same_context"] == (rep.doc_id != 1).sum() + ((rep.doc_id == 1) & (rep.turn < 2)).sum()


def test_replay_names_the_first_context_token_that_is_not_the_stored_one(stored):
    from atlas_ab import AtlasError
    target = replay_target(stored)
    L = stored.tokens.shape[1]
    history = np.zeros((B, L + 4), dtype=np.int64)
    history[:, :L] = stored.tokens
    start, count = np.zeros(B, dtype=np.int64), np.full(B, 12)
    target.prefill(0, history, start, count)                     # the stored context: accepted
    history[2, 7] += 1
    history[3, 5] += 1
    with pytest.raises(AtlasError, match=r"sequence 2 \(doc \d+\) turn 0 position 7:"):
        target.prefill(0, history, start, count)
    history[2, 7] -= 1
    history[3, 5] -= 1
    count[1] = L + 2                                             # a context longer than the stored text
    with pytest.raises(AtlasError, match=rf"sequence 1 \(doc \d+\) turn 0 position {L}:"):
        target.prefill(0, history, start, count)

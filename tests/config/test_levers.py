"""Each lever's invariants, on CPU with a tiny random checkpoint, at B > 1."""
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from atlas_ab.analysis.fingerprints import fingerprint_table
from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.proposers.ring import Ring
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.lossless_gate import check
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.telemetry.fingerprint import fingerprint_rows
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.float_sensitive

G = 10
B = 4


@pytest.fixture(scope="module")
def models():
    return tiny_models()


@pytest.fixture(scope="module")
def docs():
    return tiny_docs(n=B, turns=3, chunk=12)


def run(models, arm, docs, inspect=None):
    trunk, mtp = models
    prop = MTPProposer(trunk, mtp, arm.row_space, arm.refeed)
    wave = Wave(LiveTarget(trunk), prop, arm, docs, G, fingerprint_rows=fingerprint_rows)
    if inspect is not None:
        wave.on_step = lambda *a: inspect(wave, prop)
    trace = wave.run()
    gate = check(trunk, docs, trace.generated, G, list(range(len(docs))))
    assert gate.passed and gate.divergences == 0, f"arm {arm.name} is not lossless"
    steps = trace.steps.table().to_pandas()
    # nullable int64 fingerprints must not go through float64
    events = (trace.events.table().to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
              if trace.events is not None else None)
    return steps, events


ARMS = {
    "baseline": ArmConfig(name="baseline"),
    "catchup_on": ArmConfig(name="catchup_on", catchup=True),
    "refeed_on": ArmConfig(name="refeed_on", catchup=True, refeed=True),
    "shift_m1": ArmConfig(name="shift_m1", catchup=True, refeed=True, refeed_shift=-1),
    "shift_p1": ArmConfig(name="shift_p1", catchup=True, refeed=True, refeed_shift=1),
    "draft_conf_099": ArmConfig(name="draft_conf_099", draft_conf=0.99, catchup=True),
    "shadow_topk_4": ArmConfig(name="shadow_topk_4", shadow_topk=4),
    "oracle_p2": ArmConfig(name="oracle_p2", oracle_p2=True),
    "drafter_prefill_on": ArmConfig(name="drafter_prefill_on", drafter_prefill=True),
    "dense_refeed": ArmConfig(name="dense_refeed", row_space="dense", catchup=True, refeed=True, num_drafts=3),
    "k3": ArmConfig(name="k3", num_drafts=3),
}


@pytest.mark.parametrize("name", sorted(ARMS))
def test_every_arm_is_lossless_at_batch_width_above_one(models, docs, name):
    steps, _ = run(models, ARMS[name], docs)
    assert steps.seq.nunique() == B


DRAFTER_COLS = ["doc_id", "turn", "step", "k", "accept_len", "drafts", "target", "conf", "committed",
                "drafter_rows", "fed_rows"]


@pytest.mark.parametrize("lever", [dict(shadow_topk=4), dict(oracle_p2=True), dict(fingerprints=True)])
def test_observational_levers_change_nothing(models, docs, lever):
    base, _ = run(models, ArmConfig(name="a", catchup=True, refeed=True, fingerprints=False), docs)
    obs, _ = run(models, ArmConfig(name="b", catchup=True, refeed=True, **{"fingerprints": False, **lever}), docs)
    # bit for bit: an observational lever works beside the drafter, whose kernels run the same shapes
    pd.testing.assert_frame_equal(base[DRAFTER_COLS], obs[DRAFTER_COLS])


def test_refeed_rebuilds_every_accepted_row_with_the_target_hidden(models, docs):
    seen = []

    def inspect(wave, prop):
        # after after_verify: every surviving drafter row holds a target hidden
        for b in range(wave.B):
            seen.append(bool(prop.row_target[b, :prop.rows[b]].all()))

    steps, _ = run(models, ARMS["refeed_on"], docs, inspect)
    assert all(seen)
    # and the drafter's rows advance exactly with the committed tokens: the
    # catch-up feed rebuilds the a-1 dropped rows plus the last draft's key.
    # (Not after a turn's first step: the prefill rings nothing, as in the
    # reference engine, so a rejected first propose loses its row 0 for good.)
    s = steps.sort_values(["doc_id", "turn", "step"])
    for _, g in s.groupby(["doc_id", "turn"]):
        rows, committed = g.drafter_rows.to_numpy(), g.committed.map(len).to_numpy()
        assert (np.diff(rows)[1:] == committed[1:-1]).all()
    assert (s.fed_rows > 0).mean() > 0.5


def test_refeed_rows_without_refeed_keep_drafter_hiddens(models, docs):
    kept_drafter_rows = []

    def inspect(wave, prop):
        kept_drafter_rows.append(int(sum((~prop.row_target[b, :prop.rows[b]]).sum() for b in range(wave.B))))

    run(models, ARMS["baseline"], docs, inspect)
    assert max(kept_drafter_rows) > 0, "accepted drafts leave drafter-hidden rows behind without REFEED"


def test_shift_moves_the_labels_and_only_the_non_tautological_row_sees_it(models, docs):
    tables = {}
    for name in ("refeed_on", "shift_m1", "shift_p1"):
        _, ev = run(models, ARMS[name], docs)
        tables[name] = fingerprint_table(ev, "compact")
        # each step rings labels n+1+s .. n+1+a+s, n being that step's propose position
        assert (_first_label_offsets(ev) == ARMS[name].refeed_shift).all()
    ok = tables["refeed_on"]
    assert all(r.ok for r in ok.rows) and ok.rows[4].checked > 0
    for name in ("shift_m1", "shift_p1"):
        t = tables[name]
        a, b, c, d, e = t.rows
        assert a.ok and b.ok and c.ok, "a wrong mapping is self-consistent"
        assert e.checked > 0 and e.matched < e.checked, "only feed(key k) == propose(k+1) can see it"


def _first_label_offsets(ev):
    key = ["doc_id", "seq", "turn", "step"]
    w = ev[ev.kind == "ring_write"].groupby(key).label.min().rename("first")
    p = ev[ev.kind == "propose"].set_index(key).position
    j = pd.concat([w, p], axis=1, join="inner")
    return (j["first"] - j["position"] - 1).to_numpy()


def test_draft_conf_099_decodes_serially_and_catchup_fills_the_gap(models, docs):
    steps, ev = run(models, ARMS["draft_conf_099"], docs)
    chain = steps.conf.map(min)
    assert ((chain < 0.99) == steps.gated).all() and (steps.gated == (steps.k == 0)).all()
    assert steps.gated.mean() > 0.8
    assert (steps.accept_len[steps.gated] == 0).all()
    # a run of serial steps rings one hidden per step; the next propose feeds the gap
    s = steps.sort_values(["doc_id", "turn", "step"])
    for _, g in s.groupby(["doc_id", "turn"]):
        g = g.iloc[1:]                      # the turn's first step follows a prefill
        serial_after_serial = g.gated.to_numpy()[1:] & g.gated.to_numpy()[:-1]
        assert (g.fed_rows.to_numpy()[1:][serial_after_serial] >= 1).all()
    assert (ev[ev.kind == "feed"].label == ev[ev.kind == "feed"].key + 1).all()


def test_drafter_prefill_off_leaves_warm_turns_blind(models, docs):
    off, _ = run(models, ARMS["baseline"], docs)
    on, _ = run(models, ARMS["drafter_prefill_on"], docs)
    first = lambda s, t: s[(s.turn == t) & (s.step == 0)].sort_values("doc_id").drafter_rows.to_numpy()
    last_rows = lambda s, t: s[s.turn == t].groupby("doc_id").apply(
        lambda g: g.sort_values("step").iloc[-1].drafter_rows, include_groups=False).to_numpy()
    # turn 0 is prefilled in both (the target prefill starts at position 0)
    assert (first(off, 0) == first(on, 0)).all() and (first(off, 0) >= 11).all()
    for t in (1, 2):
        # OFF: the warm turn's first propose sees only the drafter's own rows
        assert (first(off, t) <= last_rows(off, t - 1) + 3).all()
        # ON: it sees the new chunk too
        assert (first(on, t) >= first(off, t) + 12).all()


def test_fingerprint_table_reads_100_percent_and_shows_a_corrupt_ring_row(models, docs, monkeypatch):
    _, ev = run(models, ARMS["refeed_on"], docs)
    table = fingerprint_table(ev, "compact")
    assert all(r.ok and r.checked > 0 for r in table.rows[:3]) and table.rows[4].ok

    orig = Ring.book                         # a step's ring writes land on the device, then are booked
    state = {"n": 0}

    def corrupt_once(self, seqs, labels):
        orig(self, seqs, labels)
        state["n"] += 1
        if state["n"] == 5:                  # one ring row lands wrong
            self.hiddens[int(seqs[0]), int(labels[0]) % self.capacity] += 1.0

    monkeypatch.setattr(Ring, "book", corrupt_once)
    _, bad = run(models, ARMS["refeed_on"], docs)
    t = fingerprint_table(bad, "compact")
    assert t.rows[0].checked - t.rows[0].matched == 1, "exactly the corrupted copy fails"


def test_oracle_probe_is_logged_only_when_draft_one_is_accepted(models, docs):
    steps, _ = run(models, ARMS["oracle_p2"], docs)
    has = steps.oracle_hit2.notna()
    assert (has == (steps.accept_len >= 1)).all() and has.any()


def test_shadow_topk_logs_k_candidates_per_depth_and_top1_is_the_draft(models, docs):
    steps, _ = run(models, ARMS["shadow_topk_4"], docs)
    for _, r in steps.iterrows():
        assert len(r.topk_ids) == 2 and all(len(x) == 4 for x in r.topk_ids)
        assert [x[0] for x in r.topk_ids] == list(r.drafts)
        assert np.allclose([p[0] for p in r.topk_probs], r.conf, atol=1e-6)


def test_draft_conf_serial_steps_decode_one_token_when_every_sequence_dropped(models, docs, monkeypatch):
    """Gating saves the verify only when every sequence of the batch dropped its drafts: then the
    step is a one-token decode (at batch width 1, every gated step); with some sequences still
    verifying, the batch runs the K+1-row verify. Either way the gate passes."""
    from atlas_ab.speculative.targets import LiveTarget

    widths = []
    real = LiveTarget.verify
    monkeypatch.setattr(LiveTarget, "verify", lambda self, v, *a: (widths.append(v.shape[1]), real(self, v, *a))[1])
    arm = ArmConfig(name="c", draft_conf=0.19, catchup=True)    # about the median chain confidence here
    one, _ = run(models, arm, docs[:1])
    serial = int(one.gated.sum())
    assert 0 < serial < len(one) and widths.count(1) == serial and widths.count(3) == len(one) - serial
    widths.clear()
    many, _ = run(models, arm, docs)
    all_gated = many.groupby(["turn", "step"]).gated.all().sum()
    assert widths.count(1) == all_gated < many.gated.sum()

"""RING_PREFILL: the turn prefill's last hidden in the ring, so the catch-up rebuilds the
row a fully rejected first propose trims (compact space: key P-1, P = the turn's first
generated position). Tiny random checkpoint, CPU fp32."""
import numpy as np
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.fingerprints import fingerprint_table
from atlas_ab.config.levers import arm_from_env, arm_to_env
from atlas_ab.config.structured import ArmConfig, validate_arm
from atlas_ab.speculative.lossless_gate import check
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.replay_tools import run
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.float_sensitive

G = 10


@pytest.fixture(scope="module")
def models():
    return tiny_models()


@pytest.fixture(scope="module")
def docs():
    return tiny_docs(n=6, turns=3, chunk=12)


def first_positions(docs, G):
    """[doc][turn] -> P, the turn's first generated position."""
    return [np.cumsum([len(c) for c in d.chunks]) + np.arange(len(d.chunks)) * G for d in docs]


def holes(wave, docs):
    """(doc, turn) pairs whose drafter lacks key P-1 once the wave is over (read from the
    drafter's row bookkeeping; nothing rebuilds a key behind the drafter's newest row)."""
    prop = wave.proposer
    out = set()
    for b, P in enumerate(first_positions(docs, G)):
        keys = set(prop.row_key[b, :prop.rows[b]].tolist())
        out |= {(b, t) for t, p in enumerate(P) if p - 1 not in keys}
    return out


def rejected_first_steps(steps):
    s0 = steps[steps.step == 0]
    return {(int(r.doc_id), int(r.turn)) for r in s0.itertuples() if r.accept_len == 0 or r.gated}


@pytest.mark.parametrize("base", [dict(catchup=True), dict(catchup=True, refeed=True),
                                  dict(catchup=True, draft_conf=0.5)], ids=["catchup", "refeed", "draft_conf"])
def test_the_lever_fills_the_hole_a_rejected_first_propose_leaves(models, docs, base):
    off_steps, _, off_trace, off = run(models, ArmConfig(name="off", **base), docs, G)
    on_steps, _, on_trace, on = run(models, ArmConfig(name="on", ring_prefill=True, **base), docs, G)
    # without the lever, exactly the turns whose first propose is rejected outright (or gated) lose key P-1
    hole = holes(off, docs)
    assert hole and hole == rejected_first_steps(off_steps)
    assert not holes(on, docs) and rejected_first_steps(on_steps)
    for trace in (off_trace, on_trace):
        assert check(models[0], docs, trace.generated, G, list(range(len(docs)))).passed


def test_it_changes_nothing_where_no_turn_starts_with_a_full_rejection(models):
    """One document per wave (a batch's shapes would move other documents' low bits): a
    document whose turns all start with an accepted draft runs bit-identically with and
    without the lever; one with a hole runs identically up to that turn's first step."""
    arms = [ArmConfig(name="x", catchup=True, refeed=True, fingerprints=False, ring_prefill=r) for r in (0, 1)]
    clean = holed = 0
    for d in tiny_docs(n=12, turns=2, chunk=12, seed=1):
        off, _, _, w_off = run(models, arms[0], [d], G)
        on, _, _, _ = run(models, arms[1], [d], G)
        cols = [c for c in off.columns if c not in TIMING_COLUMNS]
        hole = sorted(holes(w_off, [d]))
        if not hole:
            clean += 1
            # bit for bit: the lever's ring row is never read on a clean turn, so the same kernels run the same shapes
            assert off[cols].equals(on[cols])
            continue
        holed += 1
        t = hole[0][1]
        upto = lambda s, t=t, cols=cols: s[(s.turn < t) | ((s.turn == t) & (s.step == 0))][cols]  # noqa: E731
        assert upto(off).equals(upto(on))
        nxt = lambda s, t=t: s[(s.turn == t) & (s.step == 1)].iloc[0]  # noqa: E731
        assert nxt(on).fed_rows == nxt(off).fed_rows + 1          # the catch-up feeds key P-1 back
        assert nxt(on).drafter_rows == nxt(off).drafter_rows + 1
    assert clean and holed, (clean, holed)


def test_its_ring_writes_are_fingerprinted_and_read_back(models, docs):
    arm = ArmConfig(name="on", catchup=True, refeed=True, ring_prefill=True)
    steps, ev, _, _ = run(models, arm, docs, G)
    pre = ev[(ev.kind == "ring_write") & (ev.step == -1)]
    P = first_positions(docs, G)
    assert sorted(zip(pre.doc_id, pre.turn, pre.label)) == sorted(
        (b, t, int(P[b][t])) for b in range(len(docs)) for t in range(3))
    table = fingerprint_table(ev, "compact")
    assert table.ok
    off_ev = run(models, ArmConfig(name="off", catchup=True, refeed=True), docs, G)[1]
    off_table = fingerprint_table(off_ev, "compact")
    # row a checks every prefill ring write too; row d now sees each turn's first propose
    assert table.row("a").checked == off_table.row("a").checked + len(pre)
    first_proposes = ev[(ev.kind == "propose") & (ev.step == 0)]
    assert first_proposes.fp2.notna().all() and (first_proposes.fp == first_proposes.fp2).all()
    assert off_ev[(off_ev.kind == "propose") & (off_ev.step == 0)].fp2.isna().all()


def test_it_is_a_validated_lever_with_an_env_switch():
    with pytest.raises(AtlasError, match="ring_prefill=true requires catchup=true"):
        validate_arm(ArmConfig(ring_prefill=True))
    with pytest.raises(AtlasError, match="MTP proposer only"):
        validate_arm(ArmConfig(proposer="draft_model", catchup=True, ring_prefill=True))
    validate_arm(ArmConfig(catchup=True, ring_prefill=True))
    assert arm_from_env({"ATLAS_MTP_RING_PREFILL": "1"}).ring_prefill
    assert not arm_from_env({"ATLAS_MTP_RING_PREFILL": "true"}).ring_prefill
    assert arm_to_env(ArmConfig(catchup=True, ring_prefill=True))["ATLAS_MTP_RING_PREFILL"] == "1"

"""DRAFTER_PREFILL with CATCHUP at a turn boundary. A warm turn's drafter prefill writes pair keys
start-1 .. P-2 (start: the turn's first prefilled position, P: its first generated one); the keys
below start-1 that the drafter lacks are the previous turn's last accepted drafts. With REFEED the
ring holds their target hiddens (labels key+1), so the catch-up must write them before the prefill
writes past them: every key 0 .. P-2 then carries the target's hidden, llama.cpp's policy
(docs/ingest.md) and the independent MTP reference's (tests/helpers/mtp_reference.py). Without
REFEED nothing rings them, so the prefill adds its own keys and nothing below. CPU fp32."""
from typing import NamedTuple

import numpy as np
import pytest
import torch

from atlas_ab.config.structured import ArmConfig, validate_arm
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.runtime import checkpoint
from atlas_ab.runtime.layouts import handoff_in_effect
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.lossless_gate import check
from atlas_ab.speculative.targets import LiveTarget
from tests.helpers.mtp_reference import MIMO, mimo_checkpoint, reference_drafts
from tests.helpers.replay_tools import proposer
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.float_sensitive

G = 10


class Boundary(NamedTuple):
    """One sequence's drafter pair keys before and after a warm turn's prefill."""
    turn: int
    seq: int
    before: list
    after: list
    start: int      # the prefill's first position
    P: int          # the turn's first generated position

    @property
    def hole(self) -> bool:
        """The drafter lacks key start-2 (the previous turn's last committed pair)."""
        return self.start - 2 not in self.before


class KeysAtPrefill(Wave):
    """A wave that records a Boundary for every sequence at every warm turn's prefill."""

    def _prefill_turn(self, t):
        p, start = self.proposer, self.kv_len.copy()
        before = [p.row_key[b, :p.rows[b]].tolist() for b in range(self.B)]
        super()._prefill_turn(t)
        if t > 0:
            self.seen += [Boundary(t, b, before[b], p.row_key[b, :p.rows[b]].tolist(), int(start[b]),
                                   int(self.kv_len[b])) for b in range(self.B)]


def keys_at_prefill(models, arm, docs):
    wave = KeysAtPrefill(LiveTarget(models[0]), proposer(models, arm), arm, docs, G)
    wave.seen = []
    trace = wave.run()
    assert check(models[0], docs, trace.generated, G, list(range(len(docs)))).passed
    return wave.seen


@pytest.fixture(scope="module")
def models():
    return tiny_models()


@pytest.fixture(scope="module")
def docs():
    return tiny_docs(n=6, turns=3, chunk=12)


@pytest.mark.parametrize("row_space", ["compact", "dense"])
def test_with_refeed_the_prefill_leaves_no_hole(models, docs, row_space):
    # RING_PREFILL closes the other hole, a turn's first propose rejected outright (test_ring_prefill.py)
    arm = ArmConfig(name="x", row_space=row_space, drafter_prefill=True, catchup=True, refeed=True,
                    ring_prefill=True, fingerprints=False)
    seen = keys_at_prefill(models, arm, docs)
    assert sum(s.hole for s in seen) >= 3, "no boundary had rows to fill"
    for s in seen:
        assert s.after == list(range(s.P - 1)), s


@pytest.mark.parametrize("row_space", ["compact", "dense"])
def test_without_refeed_the_prefill_writes_its_own_keys_only(models, docs, row_space):
    arm = ArmConfig(name="x", row_space=row_space, drafter_prefill=True, catchup=True, fingerprints=False)
    seen = keys_at_prefill(models, arm, docs)
    aligned = 0
    for s in seen:
        if row_space == "dense" and s.before != list(range(s.start - 1)):
            assert s.after == s.before        # a misaligned dense drafter is left as it is
            continue
        aligned += 1
        assert s.after == s.before + list(range(s.start - 1, s.P - 1)), s
        # the compact space drops the last committed pair's row (key start-2) and nothing rings it
        assert s.hole == (row_space == "compact"), s
    assert aligned >= 3


@pytest.mark.parametrize("row_space", ["compact", "dense"])
def test_a_warm_turns_first_drafts_are_the_references(tmp_path, row_space):
    """Every drafter row below a warm turn's first propose carries the target's hidden, so the
    propose drafts what the MTP layer's definition drafts over the whole history."""
    cfg, tensors = mimo_checkpoint(tmp_path / "m", vocab_size=48, drafts_well=True)
    ck = checkpoint.load(tmp_path / "m", "cpu", torch.float32)
    arm = validate_arm(ArmConfig(name="x", row_space=row_space, drafter_prefill=True, catchup=True, refeed=True,
                                 ring_prefill=True, fingerprints=False))
    norms = handoff_in_effect(ck.layout, arm.handoff_norm, arm.recycle_norm)["in_effect"]
    prop = MTPProposer(ck.trunk, ck.mtp, arm.row_space, arm.refeed, **norms)
    docs = tiny_docs(n=4, turns=3, chunk=10)
    wave = KeysAtPrefill(LiveTarget(ck.trunk), prop, arm, docs, G)
    wave.seen = []
    trace = wave.run()
    steps = trace.steps.table().to_pandas()
    assert sum(s.hole for s in wave.seen) >= 2      # boundaries that had rows to fill
    gap = 0.0
    for b, d in enumerate(docs):
        history = []
        for t in range(1, len(d.chunks)):
            history += d.chunks[t - 1] + trace.generated[b][t - 1]
            prompt = history + d.chunks[t]
            first = steps[(steps.doc_id == d.doc_id) & (steps.turn == t) & (steps.step == 0)].iloc[0]
            assert first.position == len(prompt)
            ref_d, ref_c = reference_drafts(tensors, cfg, MIMO, prompt, arm.num_drafts, norms["handoff_norm"],
                                            norms["recycle_norm"])
            assert list(first.drafts) == ref_d, (d.doc_id, t)
            gap = max(gap, float(np.abs(np.asarray(first.conf) - np.asarray(ref_c)).max()))
    assert gap < 1e-5, gap

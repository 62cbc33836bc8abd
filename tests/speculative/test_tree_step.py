"""A tree arm's greedy decode (speculative/tree_step.py) on the shipped default model: lossless
(its committed tokens are the target's greedy decoding, ours and transformers'), and a linear
"tree" is the K-chain step for step: the same tokens, accepted counts, target and drafter KV rows."""
from pathlib import Path

import numpy as np
import pytest
import torch

from atlas_ab.config.tree import linear, parse_tree
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.runtime import checkpoint
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.speculative.tree_step import decode
from tests.helpers.greedy_ref import greedy_without_cache, heldout_prompts, transformers_greedy

pytestmark = pytest.mark.float_sensitive

DEFAULT = Path(__file__).resolve().parents[2] / "atlas_ab" / "models" / "default"
N_NEW = 40
TREES = ["[(0,), (1,), (0, 0), (1, 0)]", "topk:3,1", "[(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]"]


@pytest.fixture(scope="module")
def ck():
    return checkpoint.load(DEFAULT, device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def prompts():
    return heldout_prompts()


@pytest.fixture(scope="module")
def greedy(ck, prompts):
    return greedy_without_cache(ck.trunk, prompts, N_NEW)


def _arm(ck):
    lay = ck.layout
    return LiveTarget(ck.trunk), MTPProposer(ck.trunk, ck.mtp, "compact", refeed=False,
                                             handoff_norm=lay.handoff_norm, recycle_norm=lay.recycle_norm)


@pytest.mark.parametrize("spec", TREES)
def test_tree_decode_is_the_targets_greedy(ck, prompts, greedy, spec):
    target, prop = _arm(ck)
    got, steps = decode(target, prop, prompts, N_NEW, tree=parse_tree(spec))
    assert got == greedy
    assert (steps.max(axis=0) >= 1).all()          # the tree did accept drafts


def test_linear_tree_is_the_chain_step_for_step(ck, prompts):
    K = 3
    t1, p1 = _arm(ck)
    t2, p2 = _arm(ck)
    got_c, steps_c = decode(t1, p1, prompts, N_NEW, K=K)
    got_t, steps_t = decode(t2, p2, prompts, N_NEW, tree=linear(K))
    assert got_c == got_t and np.array_equal(steps_c, steps_t)
    assert torch.equal(t1.kv.k, t2.kv.k) and torch.equal(t1.kv.v, t2.kv.v)
    assert torch.equal(p1.kv.k, p2.kv.k) and torch.equal(p1.kv.v, p2.kv.v)
    assert (p1.rows == p2.rows).all() and (p1.row_key == p2.row_key).all() and (p1.row_target == p2.row_target).all()


@pytest.mark.slow          # loads transformers
def test_tree_decode_equals_transformers_greedy(ck, prompts, greedy):
    pytest.importorskip("transformers")
    theirs = transformers_greedy(ck, prompts, N_NEW)
    target, prop = _arm(ck)
    got, _ = decode(target, prop, prompts, N_NEW, tree=parse_tree(TREES[2]))
    assert got == theirs == greedy

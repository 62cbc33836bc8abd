"""The MTP proposer drafting a tree (MTPProposer.plan_propose_tree / draft_tree / compact_tree /
after_verify_tree) on the shipped default model: a linear tree is the K-chain's propose bit for bit
(drafts, KV rows, bookkeeping), a branch is the chain its path's tokens would have drafted, and
the compacted path's rows are that chain's rows."""
from pathlib import Path

import numpy as np
import pytest
import torch

from atlas_ab.config.tree import linear, tree_from_paths
from atlas_ab.proposers.base import RowFeed
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.runtime import checkpoint

pytestmark = pytest.mark.float_sensitive

DEFAULT = Path(__file__).resolve().parents[2] / "atlas_ab" / "models" / "default"
TOL = 1e-4         # fp32 hiddens through one MTP layer: masked extra slots change the reduction order
B, T = 2, 24


@pytest.fixture(scope="module")
def ck():
    return checkpoint.load(DEFAULT, device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def ctx(ck):
    g = torch.Generator().manual_seed(11)
    toks = torch.randint(0, ck.args.vocab_size, (B, T), generator=g)
    with torch.no_grad():
        h = ck.trunk.forward_train(toks)                                     # [B, T, H] pre-norm
        nxt = ck.trunk.logits(h[:, -1:])[:, 0].argmax(-1)                   # t_n at position T
    return toks, h, nxt


def _proposer(ck, ctx, row_space="compact", refeed=False):
    toks, h, _ = ctx
    lay = ck.layout
    p = MTPProposer(ck.trunk, ck.mtp, row_space, refeed=refeed, handoff_norm=lay.handoff_norm,
                    recycle_norm=lay.recycle_norm)
    p.alloc(np.full(B, T + 16))
    seq, key = np.repeat(np.arange(B), T - 1), np.tile(np.arange(T - 1), B)
    p.prefill_drafter(RowFeed(seq=seq, key=key, token=toks[:, 1:].numpy().reshape(-1), label=np.full(len(seq), -1),
                              hiddens=h[:, :T - 1].reshape(-1, h.shape[-1])))
    return p


def _draft_tree(p, ctx, tree):
    _, h, nxt = ctx
    plan, lengths = p.plan_propose_tree(np.full(B, T), tree, np.ones(B, dtype=bool))
    plan = {k: torch.as_tensor(v) for k, v in plan.items()}
    with torch.no_grad():
        return p.draft_tree(plan, nxt, h[:, -1], tree, lengths)


@pytest.mark.parametrize("row_space", ["compact", "dense"])
@pytest.mark.parametrize("refeed", [False, True])
def test_linear_tree_is_the_chain(ck, ctx, row_space, refeed):
    K = 3
    _, h, nxt = ctx
    for a in range(K + 1):
        pc, pt = _proposer(ck, ctx, row_space, refeed), _proposer(ck, ctx, row_space, refeed)
        chain = pc.propose(None, nxt, h[:, -1], np.full(B, T), K, np.ones(B, dtype=bool))
        nodes, conf = _draft_tree(pt, ctx, linear(K))
        assert torch.equal(nodes[:, 1:], chain.drafts) and torch.equal(conf, chain.conf)
        assert torch.equal(pt.kv.k, pc.kv.k) and torch.equal(pt.kv.v, pc.kv.v)
        assert (pt.rows == pc.rows).all() and (pt.row_key == pc.row_key).all()
        acc = np.full(B, a)
        pc.after_verify(acc, np.ones(B, dtype=bool))
        path = torch.where(torch.arange(K + 1)[None] <= a, torch.arange(K + 1)[None], -1).expand(B, -1)
        pt.compact_tree(path, linear(K), torch.as_tensor(pt.tree_base))
        pt.after_verify_tree(acc, acc.copy(), linear(K), np.ones(B, dtype=bool))
        assert (pt.rows == pc.rows).all() and (pt.row_key == pc.row_key).all()
        assert (pt.row_target == pc.row_target).all() and (pt.last_pair_key() == pc.last_pair_key()).all()
        assert torch.equal(pt.kv.k, pc.kv.k)


def _forced_chain(p, ctx, forced):
    """The linear propose whose drafts are `forced` (a list of [B] tokens): each forward's logits."""
    _, h, nxt = ctx
    K = len(forced) + 1
    plan, lengths = p.plan_propose(None, np.full(B, T), K, np.ones(B, dtype=bool))
    plan = {k: torch.as_tensor(v) for k, v in plan.items()}
    tok, hid, zs = nxt, h[:, -1], []
    with torch.no_grad():
        for i in range(K):
            out = p.mtp.forward(tok[:, None], p._handoff(hid)[:, None] if i == 0 else hid[:, None],
                                plan["d_rope"][:, i, None], plan["d_slot"][:, i, None], p.kv, p.embed,
                                length=lengths["draft"], zero_at=p.zero_at)
            zs.append(p.mtp.logits(out, p.lm_head)[:, 0])
            if i < len(forced):
                tok, hid = forced[i], p._recycle(out[:, 0])
    return zs


def _topk_clear(z, k):
    """top-k ids of z [B, V], and whether the k-th and (k+1)-th are resolvable at the tolerance."""
    v, i = z.topk(k + 1, dim=-1)
    return i[:, :k], ((v[:, :-1] - v[:, 1:]) > 1e-3).all(dim=-1)


def test_branches_are_their_paths_chains(ck, ctx):
    tree = tree_from_paths([(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 0, 0)])
    pt = _proposer(ck, ctx)
    nodes, conf = _draft_tree(pt, ctx, tree)
    # each internal node's children are the top-k of the chain that forces its path's tokens
    for v, forced in ((0, []), (1, [nodes[:, 1]]), (2, [nodes[:, 2]]), (5, [nodes[:, 2], nodes[:, 5]])):
        z = _forced_chain(_proposer(ck, ctx), ctx, forced)[-1]
        kids = tree.children(v)
        ids, clear = _topk_clear(z, len(kids))
        assert clear.all()
        assert torch.equal(nodes[:, kids], ids)
        torch.testing.assert_close(conf[:, kids - 1], torch.softmax(z, -1).gather(1, ids), atol=TOL, rtol=0)
    assert torch.equal(nodes[:, 1], _proposer(ck, ctx).propose(None, ctx[2], ctx[1][:, -1], np.full(B, T), 1,
                                                               np.ones(B, dtype=bool)).drafts[:, 0])


def test_compacted_branch_is_its_chain(ck, ctx):
    """Accept root -> (1,) -> (1, 0), a leaf at depth 2 of [(0,), (1,), (0, 0), (1, 0)]: the rows of
    the forwards at the root and at (1,) move onto base, base + 1, and are the chain's that forced
    (1,)'s token, booked as a linear propose of 2 drafts with 2 accepted."""
    tree = tree_from_paths([(0,), (1,), (0, 0), (1, 0)])
    assert tree.row_of.tolist() == [0, 1, 2, -1, -1]
    pt = _proposer(ck, ctx)
    base = pt.rows.copy()
    nodes, _ = _draft_tree(pt, ctx, tree)
    pt.compact_tree(torch.tensor([[0, 2, 4]] * B), tree, torch.as_tensor(pt.tree_base))
    pt.after_verify_tree(np.full(B, 2), np.full(B, 4), tree, np.ones(B, dtype=bool))
    pc = _proposer(ck, ctx)
    _forced_chain(pc, ctx, [nodes[:, 2]])
    pc.after_verify(np.full(B, 2), np.ones(B, dtype=bool))
    assert (pt.rows == base + 2).all() and (pt.rows == pc.rows).all()
    assert (pt.row_key == pc.row_key).all() and (pt.row_target == pc.row_target).all()
    for b in range(B):
        s = slice(int(pt.kv.base[b]), int(pt.kv.base[b]) + int(pt.rows[b]))
        torch.testing.assert_close(pt.kv.k[:, s], pc.kv.k[:, s], atol=TOL, rtol=0)
        torch.testing.assert_close(pt.kv.v[:, s], pc.kv.v[:, s], atol=TOL, rtol=0)

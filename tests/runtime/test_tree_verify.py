"""The trunk's tree verify (one cached forward over every node, `tree=` mask) against running each
root-to-leaf path as a linear sequence; a linear tree is the K-chain's verify bit for bit; the
accepted path's rows, compacted, are the linear path's rows."""
import pytest
import torch

from atlas_ab import AtlasError
from atlas_ab.config.tree import linear, tree_from_paths
from atlas_ab.proposers.tree_rows import path_slots
from atlas_ab.runtime import model as model_mod
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.model import Transformer, init_weights

pytestmark = pytest.mark.float_sensitive

ARGS = ModelArgs(vocab_size=61, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=12)
TOL = 1e-5        # fp32: the tree's rows attend over masked extra slots, a different reduction order
TREE = [(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]
CTX = (7, 4)      # committed tokens per sequence (the last is t_n, the tree's root)
CAP = 24


def _trunk():
    torch.manual_seed(0)
    m = Transformer(ARGS)
    init_weights(m, std=0.2)
    return m.eval()


def _prefill(m, ctx):
    """A KV pool holding each sequence's context but its last token (the verify's root)."""
    kv = m.new_kv([CAP] * len(ctx))
    T = max(len(c) for c in ctx) - 1
    tok = torch.zeros(len(ctx), T, dtype=torch.long)
    slots = torch.full((len(ctx), T), -1)
    for b, c in enumerate(ctx):
        tok[b, :len(c) - 1] = c[:-1]
        slots[b, :len(c) - 1] = torch.arange(len(c) - 1)
    m.forward(tok, slots.clamp(min=0), slots, kv, length=T)
    return kv


def _tree_verify(m, kv, tree, ctx, nodes):
    """nodes [B, N] the draft tokens; returns hidden [B, N+1, H] per node."""
    B = len(ctx)
    n = torch.tensor([len(c) - 1 for c in ctx])                              # t_n's position = slot
    vtok = torch.cat([torch.stack([c[-1] for c in ctx])[:, None], nodes], 1)  # [B, N+1]
    depth = torch.as_tensor(tree.depth)
    pos = n[:, None] + depth[None]                                           # by depth
    slots = n[:, None] + torch.arange(tree.n_nodes + 1)[None]                # by node id
    block = torch.as_tensor(tree.ancestors)
    assert pos.shape == slots.shape == (B, tree.n_nodes + 1)
    return m.forward(vtok, pos, slots, kv, length=int(slots.max()) + 1, tree=(slots[:, 0], block))


@pytest.mark.parametrize("fold", [64, 0], ids=["fold", "no_fold"])
@torch.no_grad()
def test_tree_verify_equals_each_path_alone(fold, monkeypatch):
    monkeypatch.setattr(model_mod, "FOLD_MAX_ROWS", fold)     # both attention layouts take the tree mask
    m, tree = _trunk(), tree_from_paths(TREE)
    g = torch.Generator().manual_seed(3)
    ctx = [torch.randint(0, 61, (c,), generator=g) for c in CTX]
    nodes = torch.randint(0, 61, (2, tree.n_nodes), generator=g)             # [B, N]
    h = _tree_verify(m, _prefill(m, ctx), tree, ctx, nodes)
    leaves = [i for i in range(tree.n_nodes + 1) if i not in set(tree.internal.tolist())]
    assert leaves == [4, 5, 6]
    for leaf in leaves:
        path = [int(i) for i in range(tree.n_nodes + 1) if tree.ancestors[leaf, i]]   # root .. leaf
        kv = _prefill(m, ctx)
        n = torch.tensor([len(c) - 1 for c in ctx])
        tok = torch.cat([torch.stack([c[-1] for c in ctx])[:, None], nodes[:, [i - 1 for i in path[1:]]]], 1)
        pos = n[:, None] + torch.arange(len(path))[None]
        ref = m.forward(tok, pos, pos, kv, length=int(pos.max()) + 1)            # [B, d+1, H]
        torch.testing.assert_close(h[:, path], ref, atol=TOL, rtol=0)
        # argmaxes agree where the top two are resolvable at the tolerance
        za, zr = m.logits(h[:, path]), m.logits(ref)
        top2 = zr.topk(2, dim=-1).values
        clear = (top2[..., 0] - top2[..., 1]) > 1e-3
        assert clear.float().mean() > 0.5
        assert torch.equal(za.argmax(-1)[clear], zr.argmax(-1)[clear])


@torch.no_grad()
def test_linear_tree_is_the_chain_bit_for_bit():
    m, K = _trunk(), 4
    tree = linear(K)
    g = torch.Generator().manual_seed(5)
    ctx = [torch.randint(0, 61, (c,), generator=g) for c in CTX]
    nodes = torch.randint(0, 61, (2, K), generator=g)
    kv_t, kv_c = _prefill(m, ctx), _prefill(m, ctx)
    h = _tree_verify(m, kv_t, tree, ctx, nodes)
    n = torch.tensor([len(c) - 1 for c in ctx])
    pos = n[:, None] + torch.arange(K + 1)[None]
    tok = torch.cat([torch.stack([c[-1] for c in ctx])[:, None], nodes], 1)
    ref = m.forward(tok, pos, pos, kv_c, length=int(pos.max()) + 1)
    assert torch.equal(h, ref)
    assert torch.equal(kv_t.k, kv_c.k) and torch.equal(kv_t.v, kv_c.v)


@torch.no_grad()
def test_compacted_rows_are_the_linear_paths():
    """Accept path root -> (1,) -> (1, 0) (nodes 0, 2, 5): after the move its rows sit at n+1, n+2
    and equal a linear forward of that path's tokens, and the next decode reads them as such."""
    m, tree = _trunk(), tree_from_paths(TREE)
    g = torch.Generator().manual_seed(7)
    ctx = [torch.randint(0, 61, (c,), generator=g) for c in CTX]
    nodes = torch.randint(0, 61, (2, tree.n_nodes), generator=g)
    kv = _prefill(m, ctx)
    _tree_verify(m, kv, tree, ctx, nodes)
    n = torch.tensor([len(c) - 1 for c in ctx])
    path = torch.tensor([[0, 2, 5, -1], [0, 2, 5, -1]])
    src, dst = path_slots(path, n, torch.arange(tree.n_nodes + 1))
    kv.move_slots(src, dst)
    ref_kv = _prefill(m, ctx)
    tok = torch.cat([torch.stack([c[-1] for c in ctx])[:, None], nodes[:, [1, 4]]], 1)   # t_n, node 2, node 5
    pos = n[:, None] + torch.arange(3)[None]
    m.forward(tok, pos, pos, ref_kv, length=int(pos.max()) + 1)
    for b in range(2):
        rows = slice(kv.base[b].item(), kv.base[b].item() + int(n[b]) + 3)
        torch.testing.assert_close(kv.k[:, rows], ref_kv.k[:, rows], atol=TOL, rtol=0)
        torch.testing.assert_close(kv.v[:, rows], ref_kv.v[:, rows], atol=TOL, rtol=0)
    nxt = torch.randint(0, 61, (2, 1), generator=g)
    p = n[:, None] + 3
    torch.testing.assert_close(m.forward(nxt, p, p, kv, length=int(p.max()) + 1),
                               m.forward(nxt, p, p, ref_kv, length=int(p.max()) + 1), atol=TOL, rtol=0)


def test_sliding_window_refused():
    a = ModelArgs(**{**ARGS.__dict__, "sliding_window": 4})
    m = Transformer(a).eval()
    kv = m.new_kv([CAP])
    s = torch.arange(3)[None]
    with pytest.raises(AtlasError, match="sliding-window"):
        m.forward(s, s, s, kv, length=3, tree=(s[:, 0], torch.ones(3, 3, dtype=torch.bool)))

"""The static tree (config/tree.py), its greedy walk and compaction (speculative/tree_accept.py)
and KVPool's tree mask and slot moves, on small hand-built trees, literally."""
import numpy as np
import pytest
import torch

from atlas_ab import AtlasError
from atlas_ab.config.tree import MAX_NODES, linear, parse_tree, tree_from_paths, tree_from_topk
from atlas_ab.proposers.tree_rows import path_slots
from atlas_ab.runtime.kv import KVPool
from atlas_ab.speculative.tree_accept import as_linear, greedy_walk, tree_tensors

# node ids: 0 root, 1 (0,), 2 (1,), 3 (0,0), 4 (0,1), 5 (1,0)
VLLM = [(0,), (1,), (0, 0), (0, 1), (1, 0)]


def test_spec_arrays():
    t = tree_from_paths([(1, 0), (0, 1), (0,), (1,), (0, 0)])     # any order: sorted by (depth, path)
    assert t.paths == tuple(VLLM)
    assert t.parent.tolist() == [-1, 0, 0, 1, 1, 2]
    assert t.depth.tolist() == [0, 1, 1, 2, 2, 2]
    assert t.rank.tolist() == [0, 0, 1, 0, 1, 0]
    assert (t.n_nodes, t.max_depth, t.topk) == (5, 2, 2)
    assert t.internal.tolist() == [0, 1, 2]
    assert t.row_of.tolist() == [0, 1, 2, -1, -1, -1]
    assert t.children(1).tolist() == [3, 4] and t.children(3).tolist() == []
    assert t.describe() == "[(0,), (1,), (0, 0), (0, 1), (1, 0)]"
    assert not t.is_linear and linear(3).is_linear


def test_ancestor_mask_literal():
    a = tree_from_paths(VLLM).ancestors.astype(int)
    assert a.tolist() == [[1, 0, 0, 0, 0, 0],
                          [1, 1, 0, 0, 0, 0],
                          [1, 0, 1, 0, 0, 0],
                          [1, 1, 0, 1, 0, 0],
                          [1, 1, 0, 0, 1, 0],
                          [1, 0, 1, 0, 0, 1]]
    # a linear tree's mask is the causal one
    assert (linear(4).ancestors == np.tril(np.ones((5, 5), dtype=bool))).all()


def test_topk_per_depth():
    assert tree_from_topk([2, 1]).paths == ((0,), (1,), (0, 0), (1, 0))
    assert parse_tree("topk:1,1,1").paths == linear(3).paths
    assert parse_tree([2, 2]).n_nodes == 6
    assert parse_tree("[(0,), (1,), (0, 0)]").paths == ((0,), (1,), (0, 0))


@pytest.mark.parametrize("paths, msg", [
    ([(0,), (0, 1, 0)], "tree path (0, 1, 0): its parent (0, 1) is missing"),
    ([(0,), (1, 0)], "tree path (1, 0): its parent (1,) is missing"),
    ([(0,), (0,)], "tree path (0,): listed twice"),
    ([(0,), (-1,)], "tree path (-1,): a rank is negative"),
    ([(8,)], "tree path (8,): rank 8 is past the drafter's top-8"),
    ([()], "tree path (): a path is a non-empty tuple of child ranks (ints)"),
    ([(r,) for r in range(MAX_NODES)] + [(0, 0)],
     "tree path (0, 0): the tree has 9 drafts, wider than the verify's static 8 (num_drafts' range)"),
])
def test_refusals_name_the_path(paths, msg):
    with pytest.raises(AtlasError) as e:
        tree_from_paths(paths)
    assert str(e.value) == msg and "\n" not in str(e.value)


def test_parse_refusals():
    for bad in ("topk:2,x", "not a tree", "topk:0"):
        with pytest.raises(AtlasError):
            parse_tree(bad)


def _walk(paths, tokens, target):
    t = tree_from_paths(paths)
    tt = tree_tensors(t, "cpu")
    return greedy_walk(torch.as_tensor(tokens), torch.as_tensor(target), tt, t.max_depth)


def test_greedy_walk_literal():
    # tokens per node (node 0: t_n); target argmax per node (what follows it)
    tokens = [[9, 5, 6, 7, 8, 4],    # (1,) matches (6 == target at root), then (1,0) matches (4 == target at 2)
              [9, 5, 6, 7, 8, 4],    # (0,) matches, (0,1) matches
              [9, 5, 6, 7, 8, 4],    # nothing matches
              [9, 5, 6, 7, 8, 4]]    # (0,) matches, its children do not, (1,) does not: a = 1
    target = [[6, 0, 4, 0, 0, 0],
              [5, 8, 0, 0, 0, 0],
              [1, 0, 0, 0, 0, 0],
              [5, 1, 4, 0, 0, 0]]
    acc, path, best = _walk(VLLM, tokens, target)
    assert acc.tolist() == [2, 2, 0, 1]
    assert best.tolist() == [5, 4, 0, 1]
    assert path.tolist() == [[0, 2, 5], [0, 1, 4], [0, -1, -1], [0, 1, -1]]
    # the linear view: the target's argmax along the path (commit = drafts + bonus), the drafts along it
    tl = as_linear(path, torch.tensor(target), fill=-1)
    assert tl.tolist() == [[6, 4, 0], [5, 8, 0], [1, -1, -1], [5, 1, -1]]
    dl = as_linear(path, torch.tensor(tokens), fill=-1)[:, 1:]
    assert dl.tolist() == [[6, 4], [5, 8], [-1, -1], [5, -1]]


def test_walk_ties_take_the_lowest_node():
    # two siblings carrying the same token both match: the lower id wins
    acc, path, best = _walk([(0,), (1,)], [[0, 3, 3]], [[3, 0, 0]])
    assert (acc.tolist(), best.tolist(), path.tolist()) == ([1], [1], [[0, 1]])


def test_walk_linear_is_the_chain_rule():
    # on a linear tree the walk is greedy_accept's cumulative product
    from atlas_ab.speculative.sampling import greedy_accept
    g = torch.Generator().manual_seed(0)
    K = 4
    for _ in range(20):
        drafts = torch.randint(0, 3, (6, K), generator=g)
        target = torch.randint(0, 3, (6, K + 1), generator=g)
        tokens = torch.cat([torch.zeros(6, 1, dtype=torch.long), drafts], 1)
        acc, path, _ = _walk(linear(K).paths, tokens, target)
        assert acc.tolist() == greedy_accept(drafts, target).tolist()
        d = torch.arange(K + 1)[None]
        assert path.tolist() == torch.where(d <= acc[:, None], d, -1).tolist()


def test_path_slots_literal():
    t = tree_from_paths(VLLM)
    path = torch.tensor([[0, 2, 5], [0, 1, 4], [0, -1, -1], [0, 1, 3]])
    base = torch.tensor([10, 20, 30, -1])
    # the target's rows: one per node (row_of = node id)
    src, dst = path_slots(path, base, torch.arange(6))
    assert src.tolist() == [[-1, 12, 15], [-1, -1, 24], [-1, -1, -1], [-1, -1, -1]]
    assert dst.tolist() == [[-1, 11, 12], [-1, -1, 22], [-1, -1, -1], [-1, -1, -1]]
    # the drafter's rows: internal nodes only (0, 1, 2 -> rows 0, 1, 2); a leaf has none
    src, dst = path_slots(path, base, torch.as_tensor(t.row_of))
    assert src.tolist() == [[-1, 12, -1], [-1, -1, -1], [-1, -1, -1], [-1, -1, -1]]
    assert dst.tolist() == [[-1, 11, -1], [-1, -1, -1], [-1, -1, -1], [-1, -1, -1]]


def test_move_slots_overlapping():
    kv = KVPool(2, 1, 1, [6, 6])
    kv.k[:] = torch.arange(2 * 14, dtype=torch.float32).view(2, 14, 1, 1)
    kv.v[:] = -kv.k
    before = kv.k.clone()
    # seq 0: 3 -> 1 and 4 -> 3 (4's source is read before 3 is overwritten); seq 1: nothing
    kv.move_slots(torch.tensor([[3, 4], [-1, -1]]), torch.tensor([[1, 3], [-1, 2]]))
    want = before.clone()
    want[:, 1], want[:, 3] = before[:, 3], before[:, 4]
    assert torch.equal(kv.k[:, :6], want[:, :6]) and torch.equal(kv.k[:, 7:13], before[:, 7:13])
    assert torch.equal(kv.v[:, :6], -want[:, :6])


def test_tree_mask_literal():
    kv = KVPool(1, 1, 1, [12, 12])
    block = torch.as_tensor(tree_from_paths([(0,), (1,), (0, 0)]).ancestors)   # [4, 4]
    # seq 0: context 0..4, tree at slots 5..8; seq 1 inactive (padding)
    slots = torch.tensor([[5, 6, 7, 8], [-1, -1, -1, -1]])
    m = kv.tree_mask(slots, 10, torch.tensor([5, -1]), block)[:, 0].int()
    ctx = [1] * 5
    assert m[0].tolist() == [ctx + [1, 0, 0, 0, 0],
                             ctx + [1, 1, 0, 0, 0],
                             ctx + [1, 0, 1, 0, 0],
                             ctx + [1, 1, 0, 1, 0]]
    assert m[1].tolist() == [[1] + [0] * 9] * 4        # padding: slot 0 only, as KVPool.mask
    # a linear block over the causal rule is KVPool.mask exactly
    lin = torch.as_tensor(linear(3).ancestors)
    s = torch.tensor([[5, 6, 7, 8], [2, 3, 4, 5]])
    assert torch.equal(kv.tree_mask(s, 10, s[:, 0], lin), kv.mask(s, 10))


def test_the_tree_lever_composes_and_refuses_in_one_line():
    from atlas_ab.config.levers import arm_of
    from atlas_ab.config.structured import ArmConfig, validate_arm
    from tests.helpers.compose import cfg_of
    arm = arm_of(cfg_of("+arm=tree_top2"))
    assert arm.tree == "topk:2,1" and parse_tree(arm.tree).n_nodes == 4 and arm.num_drafts == 2
    assert parse_tree(arm_of(cfg_of("+arm=tree_linear2")).tree).is_linear
    for bad, msg in ((dict(tree="[(0,), (1, 1)]"), "tree path (1, 1): its parent (1,) is missing"),
                     (dict(tree="topk:2,1", num_drafts=3), "is 2 deep but num_drafts=3"),
                     (dict(tree="topk:2,1", catchup=True), "tree runs with catchup off"),
                     (dict(tree="topk:2,1", proposer="draft_model"), "tree applies to the MTP proposer only")):
        with pytest.raises(AtlasError) as e:
            validate_arm(ArmConfig(**bad))
        assert msg in str(e.value) and "\n" not in str(e.value)

"""Multi-draft rejection sampling over a static draft tree: a tree arm's sampled (live) verify.

Terms (config/tree.py for node, path, rank, depth; sampling.py for the chain's):
  draft tree      the tree's nodes drafted by the MTP drafter: node v's children are the
                  drafter's top-k at v, the child of rank j its j-th candidate (distinct tokens).
                  Deterministic, so each child is a point-mass proposal (one-hot q), as
                  SpecInfer's and EAGLE's top-k candidates are
  p_v             the target distribution at node v: distribution.probs of the verify's logits
                  at v (the token after v's path) at the run's temperature / top-k / top-p
  residual r      at a node, p_v with every child tested so far zeroed, renormalised
  walk            from the root: at node v, test its children c_1 .. c_k in rank order, c_j
                  against the current residual r: pass iff r(c_j) >= u_j (the one-hot accept
                  test `q(x) > 0 and p(x) >= u q(x)` with q = 1 at c_j); a failed c_j is zeroed
                  out of r. The first child that passes is accepted and the walk moves to it.
  recovered token every child of v failed: a draw from the final residual (p_v without all of
                  v's children, renormalised); the step stops
  bonus token     v has no children (a leaf): a draw from p_v; the step stops
  accepted a      the depth of the node the walk stops at; the path is its root-to-node ids
The step outputs a+1 tokens: the accepted children's tokens, then the recovered or bonus token.
Given everything before it, the output at each depth is a draw from p at the walk's node there:
child c_j is output with probability prod_{i<j}(1 - r_i(c_i)) r_j(c_j) = p_v(c_j), and any other
token x with probability (1 - sum_j p_v(c_j)) p_v(x) / (1 - sum_j p_v(c_j)) = p_v(x); by the chain
rule the output is lossless (SpecInfer, Miao et al. 2024, section 4; the greedy-draft case of
multi-draft speculative sampling). A linear tree (one child per depth) is exactly sampling.py's
chain with `draft_policy: greedy`.

Uniform keys (uniforms.uniform(seed, doc, turn, n, depth, stream), n the step's position):
  child c of rank 0 at depth d   (depth d, ACCEPT): the chain's accept coin of depth d
  child c of rank r >= 1         (depth d * MAX_RANK + r, TREE_ACCEPT): its own stream
  recovered / bonus at depth d   (depth d, TOKEN), as the chain's (d = a+1, 1..D+1)
  PIT V of the output at depth d (depth d, PIT), as the chain's
so a linear tree draws every number the K-chain with greedy drafts draws, and its rows are the
chain's. Nodes of one depth and rank under different parents share a key: a step tests the
children of one node per depth, and the key is independent of the coins of the depths before,
so each coin a step reads is fresh and used once.

Telemetry along the linear view (tree_accept.linear_view: the path, then rank-0 children):
  accept_prob at depth i   sum_j p_v(c_j) over the children of the view's node v at depth i-1:
                           P(the walk at v accepts one of its children) (the chain's p_i(x_i) for
                           one child); NaN where the view has no node or the node no children
  alpha1                   accept_prob at depth 1 (the root is always on the path)
  pit                      the randomized PIT of each output token under p at its node, in the
                           order children first (by rank), then the vocabulary (the chain's order
                           for greedy drafts: the draft first): a lossy walk errs on the children's
                           mass, which that order turns into a shift of u (pit_gate.py)

Batched over B on the device, static Python loops over depth and child column, no host reads and
no host->device copies inside the step (`tables` makes the constant arrays once): the step may be
captured as a CUDA graph.

Shapes: B sequences, N draft nodes (node 0 the root), D the tree's depth, R the most children of
one node, V vocabulary, U = N+1 + 2(D+1) keys per step.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from atlas_ab.config.tree import MAX_RANK
from atlas_ab.speculative import uniforms
from atlas_ab.speculative.distribution import draw
from atlas_ab.speculative.sampling import PLACEHOLDER, output_pit
from atlas_ab.speculative.tree_accept import as_linear, linear_view


@dataclass(frozen=True)
class TreeTables:
    """A tree's constant device arrays for the sampler, made once per step builder."""
    children: torch.Tensor      # [N+1, R] long: each node's children in rank order, -1 past them
    rank0_child: torch.Tensor   # [N+1] long: each node's rank-0 child, -1 where none
    key_depth: torch.Tensor     # [U] long: the uniforms' depth fields (nodes' accept, then TOKEN, then PIT)
    key_stream: torch.Tensor    # [U] long: their stream fields
    depth: int                  # D


@functools.lru_cache(maxsize=32)
def tables(tree, device) -> TreeTables:
    """The sampler's arrays of `tree` (config/tree.TreeSpec) on `device`, keyed as the module says.
    Made once per (tree, device): a later wave replays the graphs the first captured, by address."""
    N1, D = tree.n_nodes + 1, tree.max_depth
    kids = [tree.children(v).tolist() for v in range(N1)]
    R = max(len(k) for k in kids)
    children = torch.tensor([k + [-1] * (R - len(k)) for k in kids], dtype=torch.long)
    depth, rank = torch.as_tensor(tree.depth), torch.as_tensor(tree.rank)
    # node 0 (never tested) gets (0, TREE_ACCEPT), which no child's key equals (rank >= 1 there)
    node_depth = torch.where(rank == 0, depth, depth * MAX_RANK + rank)
    node_stream = torch.where((rank == 0) & (depth > 0), uniforms.ACCEPT, uniforms.TREE_ACCEPT)
    out_depth = torch.arange(1, D + 2)
    key_depth = torch.cat([node_depth, out_depth, out_depth])
    key_stream = torch.cat([node_stream, torch.full((D + 1,), uniforms.TOKEN), torch.full((D + 1,), uniforms.PIT)])
    return TreeTables(children.to(device), torch.as_tensor(tree.rank0_child, device=device),
                      key_depth.to(device), key_stream.to(device), D)


@dataclass
class TreeUniforms:
    """The uniforms of one tree step (keys: the module docstring)."""
    accept: torch.Tensor    # [B, N+1] float64: each node's accept coin (node 0's unused)
    token: torch.Tensor     # [B, D+1] float64: the recovered / bonus draw at output depth 1..D+1
    pit: torch.Tensor       # [B, D+1] float64: the PIT's V at output depth 1..D+1

    @staticmethod
    def of(seed: int, doc: torch.Tensor, turn: int, n: torch.Tensor, t: TreeTables) -> "TreeUniforms":
        """doc [B], n [B] (the step's position) long tensors on the device; one hash call."""
        u = uniforms.uniform(seed, doc[:, None], turn, n[:, None], t.key_depth[None], t.key_stream[None])  # [B, U]
        N1, D1 = t.children.shape[0], t.depth + 1
        return TreeUniforms(accept=u[:, :N1], token=u[:, N1:N1 + D1], pit=u[:, N1 + D1:])


@dataclass
class TreeVerdict:
    """One tree step's sampled verification, all on the device, read along the linear view."""
    accepted: torch.Tensor      # [B] long: the depth the walk stopped at, 0..D
    path: torch.Tensor          # [B, D+1] long: the walk's node ids by depth, -1 past its end
    view: torch.Tensor          # [B, D+1] long: the path continued by rank-0 children (linear_view)
    tokens: torch.Tensor        # [B, D+1] long: the path's tokens, recovered/bonus at depth a+1, PLACEHOLDER after
    accept_prob: torch.Tensor   # [B, D] float32: P(the view's node at depth i-1 accepts a child); NaN where none
    alpha1: torch.Tensor        # [B] float32: accept_prob at depth 1
    pit: torch.Tensor           # [B, D+1] float32: PIT of each output token, NaN past the output


def _residual_mass(res: torch.Tensor) -> torch.Tensor:
    """[B] the residual's total after a rejection, which renormalises the next child's test
    (tests replace it to inject a sampler that does not renormalise)."""
    return res.sum(-1)


def walk(tokens: torch.Tensor, p: torch.Tensor, children: torch.Tensor, u_accept: torch.Tensor, D: int):
    """The multi-draft rejection walk. tokens [B, N+1] (node 0: t_n; the rest the drafts), p
    [B, N+1, V] the target distribution at each node, children [N+1, R], u_accept [B, N+1], D the
    tree's depth. Returns accepted [B] long, path [B, D+1] long (-1 past its end) and dist [B, V],
    the unnormalised distribution of the output at depth a+1 (the final residual, or p at a leaf)."""
    B, R = tokens.shape[0], children.shape[1]
    dev = tokens.device
    ar = torch.arange(B, device=dev)
    cur = torch.zeros(B, dtype=torch.long, device=dev)                    # [B] the walk's node
    live = torch.ones(B, dtype=torch.bool, device=dev)                    # [B] still walking
    path = torch.full((B, D + 1), -1, dtype=torch.long, device=dev)       # [B, D+1]
    path[:, 0] = 0
    dist = p[:, 0]                                                        # [B, V]
    for d in range(D + 1):                   # at d = D every live node is a leaf: its bonus
        pv = p[ar, cur]                                                   # [B, V] p at the walk's node
        res = pv                                                          # [B, V] its residual
        # p_v counts as normalised (softmax's), as the chain's accept test takes it: rank 0 is the chain's test
        mass = torch.ones(B, dtype=pv.dtype, device=dev)                  # [B] the residual's total
        nxt = torch.full_like(cur, -1)                                    # [B] the accepted child, -1: none yet
        for j in range(R):
            c = children[cur, j]                                          # [B] the j-th child, -1: none
            cc = c.clamp(min=0)
            x = tokens[ar, cc]                                            # [B] its token
            tested = live & (c >= 0) & (nxt < 0)                          # [B]
            px = res.gather(-1, x[:, None]).squeeze(-1) / mass            # [B] r(c_j)
            ok = tested & (px >= u_accept[ar, cc])                        # [B]
            nxt = torch.where(ok, c, nxt)
            rej = tested & ~ok                                            # [B]
            res = torch.where(rej[:, None], res.scatter(-1, x[:, None], 0.0), res)
            mass = torch.where(rej, _residual_mass(res), mass)
        stop = live & (nxt < 0)                                           # [B] every child failed, or a leaf
        # a residual without mass (a rejection of probability 0): p_v itself, as sampling._residual
        res = torch.where(res.sum(-1, keepdim=True) > 0, res, pv)
        dist = torch.where(stop[:, None], res, dist)
        live = live & ~stop
        if d < D:
            path[:, d + 1] = torch.where(live, nxt, -1)
            cur = torch.where(live, nxt, cur)
    accepted = (path >= 0).long().sum(1) - 1                              # [B]
    return accepted, path, dist


def child_mass(tokens: torch.Tensor, p: torch.Tensor, children: torch.Tensor) -> torch.Tensor:
    """[B, N+1] float32: sum_j p_v(c_j) over each node's children (tokens [B, N+1], p [B, N+1, V]),
    the probability that the walk at v accepts one of them (distinct tokens); NaN at a leaf."""
    B, N1, R = tokens.shape[0], *children.shape
    has = children >= 0                                                   # [N+1, R]
    tok = tokens[:, children.clamp(min=0).reshape(-1)].view(B, N1, R)     # [B, N+1, R] the children's tokens
    pc = p.gather(-1, tok)                                                # [B, N+1, R]
    mass = torch.where(has[None], pc, 0.0).sum(-1)                        # [B, N+1]
    return torch.where(has.any(-1)[None], mass, float("nan")).float()


def pit_key(tokens: torch.Tensor, view: torch.Tensor, children: torch.Tensor, V: int) -> torch.Tensor:
    """[B, D+1, V] float32 the PIT's order along the view (descending): the view node's children
    by rank (R - j for the j-th), then the vocabulary (0); all 0 where the view has no node."""
    B, D1 = view.shape
    R = children.shape[1]
    kids = torch.where((view >= 0)[..., None], children[view.clamp(min=0)], -1)   # [B, D+1, R]
    tok = tokens.gather(1, kids.clamp(min=0).view(B, -1)).view(B, D1, R)          # [B, D+1, R]
    val = torch.where(kids >= 0, (R - torch.arange(R, device=view.device)).float(), 0.0)  # [B, D+1, R]
    key = torch.zeros(B, D1, V, device=view.device)                               # [B, D+1, V]
    return key.scatter_reduce(-1, tok, val, "amax")      # amax: an absent child's 0 never lowers a key


def sample(tokens: torch.Tensor, p: torch.Tensor, t: TreeTables, u: TreeUniforms) -> TreeVerdict:
    """Verify a draft tree: tokens [B, N+1] (node 0: t_n), p [B, N+1, V] the target distribution
    at each node, t the tree's `tables`, u the step's `TreeUniforms`."""
    B, D = tokens.shape[0], t.depth
    ar = torch.arange(B, device=tokens.device)
    accepted, path, dist = walk(tokens, p, t.children, u.accept, D)
    z = draw(dist, u.token[ar, accepted])                                 # [B] recovered / bonus
    depth = torch.arange(D + 1, device=tokens.device)[None, :]            # [1, D+1]
    on = tokens.gather(1, path[:, 1:].clamp(min=0))                       # [B, D] the path's children's tokens
    padded = torch.cat([on, on.new_full((B, 1), PLACEHOLDER)], dim=1)     # [B, D+1]
    out = torch.where(depth < accepted[:, None], padded,
                      torch.where(depth == accepted[:, None], z[:, None], PLACEHOLDER))
    view = linear_view(path, accepted, t.rank0_child)                     # [B, D+1]
    accept_prob = as_linear(view, child_mass(tokens, p, t.children), fill=float("nan"))[:, :D]   # [B, D]
    p_view = as_linear(view, p)                                           # [B, D+1, V]
    pit = output_pit(p_view, out, accepted, u.pit, pit_key(tokens, view, t.children, p.shape[-1]))
    return TreeVerdict(accepted=accepted, path=path, view=view, tokens=out, accept_prob=accept_prob,
                       alpha1=accept_prob[:, 0], pit=pit)

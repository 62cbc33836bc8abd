"""One greedy verify step of a tree arm, and a greedy decode driven by it (the eager path).

A tree step (config/tree.py for the vocabulary) is a linear step with three pieces swapped:
the drafter drafts the tree (`MTPTree.draft_tree`, proposers/mtp_tree.py), the target verifies every node in one
forward under the tree mask (positions by depth, slots by node id: `LiveTarget.verify(tree=)`;
replay reads it from the stored trajectory, `ReplayTarget.verify(tree=)`),
and greedy acceptance walks the tree (`tree_accept.greedy_walk`; a sampled run's live verify:
the multi-draft rejection walk of `tree_sampling.py` over the verify's logits). Then the accepted path's KV rows,
the target's and the drafter's, move onto the slots a linear draft of its tokens would have used
(`tree_rows.path_slots`, `KVPool.move_slots`), and the drafter books the path as a linear propose
(`after_verify_tree`): the step ends exactly as if the path had been a linear draft, so its
outputs along the path (`as_linear`) are what a K-chain's verify returns.

`decode` runs such steps from a prompt to n tokens, B sequences at once, every lever off (the
baseline arm's drafter: rows only from proposes); `tree=None` runs the linear K-chain through the
same driver (the proposer's `propose`, the verify, `greedy_accept`, `after_verify`), so both arms
meet in one place and can be compared row for row.

Shapes: B sequences, N draft nodes (node 0: t_n), D the tree's depth, H hidden size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from atlas_ab.proposers.tree_rows import path_slots
from atlas_ab.speculative.sampling import greedy_accept
from atlas_ab.speculative.tree_accept import as_linear, greedy_walk, linear_view, tree_tensors


@dataclass
class TreeStep:
    nodes: torch.Tensor        # [B, N+1] t_n then the drafts
    target: torch.Tensor | None  # [B, N+1] the target's argmax at each node (None: a sampled verify)
    accepted: torch.Tensor     # [B] the accepted path's depth
    path: torch.Tensor         # [B, D+1] its node ids by depth (-1 past it)
    tokens: torch.Tensor       # [B, D+1] the argmax along `view`, or the sampled output (commit: tokens[:, :a+1])
    vh: torch.Tensor           # [B, D+1, H] the target's hiddens along `view`
    topk_ids: torch.Tensor | None = None   # [B, K, k] the chain's SHADOW_TOPK candidates (linear_step, topk > 0)
    view: torch.Tensor | None = None       # [B, D+1] the path continued by rank-0 children (tree_accept.linear_view)
    sampled: object | None = None          # tree_sampling.TreeVerdict of a sampled verify (tokens: its output)


def tree_positions(tree, tt: dict, n, active):
    """The verify's positions (by depth) and KV slots (by node id) [B, N+1] at positions n [B]
    (tensors; slot -1 where inactive)."""
    pos = n[:, None] + tt["depth"][None]                                                # [B, N+1]
    slots = torch.where(active[:, None], n[:, None] + torch.arange(tree.n_nodes + 1, device=n.device)[None], -1)
    return pos, slots


def verify_tree(target, prop, tree, tt: dict, nodes, pos, slots, length: int, draft_base, sampler=None) -> TreeStep:
    """Device: the target's verify of every node (nodes, pos, slots [B, N+1]) under the tree mask,
    the greedy walk, and both KVs compacted onto the path's linear slots (draft_base [B]: the
    propose's first drafter row, the plan's d_slot[:, 0]; the drafter's only under replay: a
    `ReplayTarget` has no KV). Books nothing on the host (`after_verify_tree` does, from the path).
    sampler: a sampled run's walk instead of the greedy one (live only), nodes [B, N+1] and the
    verify's logits [B, N+1, V] -> tree_sampling.TreeVerdict; its tokens are the step's output."""
    mask = (slots[:, 0], tt["ancestors"])
    if sampler is None:
        vh, tgt = target.verify(nodes, pos, slots, length, tree=mask)
        acc, path, _ = greedy_walk(nodes, tgt, tt, tree.max_depth)
        verdict = None
    else:
        vh, logits = target.verify_logits(nodes, pos, slots, length, tree=mask)     # [B, N+1, H], [B, N+1, V]
        verdict = sampler(nodes, logits)
        acc, path, tgt = verdict.accepted, verdict.path, None
    if target.kv is not None:      # replay reads the stored trajectory's rows: nothing of the target's to move
        target.kv.move_slots(*path_slots(path, slots[:, 0], tt["node"]))
    prop.compact_tree(path, tree, draft_base)
    if verdict is None:
        view = linear_view(path, acc, tt["rank0_child"])
        tokens = as_linear(view, tgt, fill=-1)
    else:
        view, tokens = verdict.view, verdict.tokens
    return TreeStep(nodes, tgt, acc, path, tokens, as_linear(view, vh), view=view, sampled=verdict)


@torch.no_grad()
def tree_step(target, prop, tree, tt: dict, last_tok, last_hid, n: np.ndarray, active: np.ndarray) -> TreeStep:
    """One step at positions n [B] (t_n = last_tok [B], last_hid [B, H] the target hidden of n-1)."""
    dev = last_tok.device
    plan, lengths = prop.plan_propose_tree(n, tree, active)
    nodes, _ = prop.draft_tree({k: torch.as_tensor(v, device=dev) for k, v in plan.items()}, last_tok, last_hid,
                               tree, lengths)                                           # [B, N+1]
    pos, slots = tree_positions(tree, tt, torch.as_tensor(n, device=dev), torch.as_tensor(active, device=dev))
    s = verify_tree(target, prop, tree, tt, nodes, pos, slots, int(n.max()) + tree.n_nodes + 1,
                    torch.as_tensor(plan["d_slot"][:, 0], device=dev))
    acc = s.accepted.cpu().numpy()
    best = s.path.cpu().numpy()[np.arange(len(n)), acc]
    prop.after_verify_tree(acc, best, tree, active)
    return s


@torch.no_grad()
def linear_step(target, prop, K: int, last_tok, last_hid, n: np.ndarray, active: np.ndarray,
                topk: int = 0) -> TreeStep:
    """The K-chain's step in the same terms (path = 0..a); topk: log SHADOW_TOPK's candidates."""
    dev = last_tok.device
    p = prop.propose(None, last_tok, last_hid, n, K, active, topk=topk)
    vtok = torch.cat([last_tok[:, None], p.drafts], 1)                                  # [B, K+1]
    pos = torch.as_tensor(n, device=dev)[:, None] + torch.arange(K + 1, device=dev)[None]
    slots = torch.where(torch.as_tensor(active, device=dev)[:, None], pos, -1)
    vh, tgt = target.verify(vtok, pos, slots, int(n.max()) + K + 1)
    acc = greedy_accept(p.drafts, tgt)
    prop.after_verify(acc.cpu().numpy(), active)
    d = torch.arange(K + 1, device=dev)[None]
    path = torch.where(d <= acc[:, None], d, -1)
    return TreeStep(vtok, tgt, acc, path, torch.where(path >= 0, tgt, -1), vh, p.topk_ids)


@torch.no_grad()
def decode(target, prop, prompts: list, n_new: int, tree=None, K: int = 2, topk: int = 0, on_step=None):
    """Greedy speculative decoding of each prompt (a list of token-id lists) to n_new tokens.
    Returns (committed [B] lists of n_new ids, accepted per step [steps, B] with -1 where a
    sequence had finished). on_step(step, active): called with each TreeStep (topk: the chain's
    SHADOW_TOPK candidates in it)."""
    B = len(prompts)
    dev = target.device
    width = (tree.n_nodes if tree is not None else K) + 1
    L = np.array([len(p) for p in prompts])
    budget = L + n_new + width + 1
    target.alloc(budget)
    prop.alloc(budget)
    tt = tree_tensors(tree, dev) if tree is not None else None
    T = int(L.max())
    tok = torch.zeros(B, T, dtype=torch.long, device=dev)
    slots = torch.full((B, T), -1, dtype=torch.long, device=dev)
    for b, p in enumerate(prompts):
        tok[b, :len(p)] = torch.as_tensor(p)
        slots[b, :len(p)] = torch.arange(len(p))
    hid = target.trunk.forward(tok, slots.clamp(min=0), slots, target.kv, length=T)   # [B, T, H]
    last_i = torch.as_tensor(L - 1, device=dev)
    last_hid = hid[torch.arange(B, device=dev), last_i]                                 # [B, H]
    last_tok = target.trunk.logits(last_hid[:, None])[:, 0].argmax(-1)                  # [B]
    out = [[int(last_tok[b])] for b in range(B)]
    n = L.copy()                                                                         # t_n's position
    steps = []
    while True:
        active = np.array([len(o) < n_new for o in out])
        if not active.any():
            break
        s = (tree_step(target, prop, tree, tt, last_tok, last_hid, n, active) if tree is not None
             else linear_step(target, prop, K, last_tok, last_hid, n, active, topk))
        if on_step is not None:
            on_step(s, active)
        acc = s.accepted.cpu().numpy()
        toks = s.tokens.cpu().numpy()
        steps.append(np.where(active, acc, -1))
        b_idx = torch.arange(B, device=dev)
        a_t = torch.as_tensor(acc, device=dev)
        nxt_tok, nxt_hid = s.tokens[b_idx, a_t], s.vh[b_idx, a_t]                      # the bonus; hidden of n+a
        for b in np.nonzero(active)[0]:
            out[b] += [int(t) for t in toks[b, :acc[b] + 1]]
        act_t = torch.as_tensor(active, device=dev)
        last_tok = torch.where(act_t, nxt_tok, last_tok)
        last_hid = torch.where(act_t[:, None], nxt_hid, last_hid)
        n = np.where(active, n + acc + 1, n)
    return [o[:n_new] for o in out], np.array(steps)

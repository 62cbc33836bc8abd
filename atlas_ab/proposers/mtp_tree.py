"""TREE for the MTP-head drafter: a tree propose planned on the host, drafted depth by depth on
the device, and its accepted path's rows compacted and booked as a linear propose's
(config/tree.py's vocabulary; the loop's side is speculative/tree_step.py).

A mixin of `MTPProposer` (mtp_head.py): it reads and books the same drafter state (rows,
row_key, row_target, last_drafted, kv), books its rows with `_book_propose` and uses its `_handoff`,
`_recycle` and `mtp`.
Shapes: B sequences, N draft nodes (node 0 the root), M internal nodes (one drafter row each),
D the tree's depth, H the hidden size, V the vocabulary.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from atlas_ab.proposers.capabilities import TreeDrafter
from atlas_ab.proposers.rowspace import trim_table
from atlas_ab.proposers.tree_rows import path_slots


class MTPTree(TreeDrafter):
    def plan_propose_tree(self, positions, tree, active) -> tuple[dict, dict]:
        """Host: book a tree propose's M rows (one per internal node, `tree.row_of`) per active
        sequence. Row r, the forward at internal node v, has pair key n-1+depth(v) and the RoPE
        position a linear draft gives that key (`rope_of` at the linear slot base + depth(v)), so
        the path's rows, once compacted onto base .. base+depth, are a linear propose's. Returns
        d_rope, d_slot [B, M] int64 (slot -1 inactive) and the drafter's read length."""
        plan, lengths = self._book_propose(positions, active, tree.depth[tree.internal])
        self.tree_base = self.row0_slot.copy()
        return plan, lengths

    def draft_tree(self, plan: dict, last_tokens, target_hidden, tree, lengths: dict):
        """Device: the tree's drafts, depth by depth. The forward at internal node v takes v's token
        and, as its hidden, the recycled output of the forward at v's parent, the one whose top-k
        drafted v (the root: the target's verified hidden, through `_handoff`). That is the
        handoff rule of the chain (docs/reference_engine.md: draft 1 from the target's hidden,
        every later draft from the drafter's own block output) applied along each root-to-leaf
        path, so every path is drafted exactly as a linear propose of its tokens would be: siblings
        share their parent's hidden, and each row attends to the committed rows and its
        ancestors' (a tree mask over the propose's rows). v's children are its head's top-k, the
        child of rank j the j-th candidate. Returns nodes [B, N+1] (node 0: last_tokens) and conf
        [B, N] (each draft's softmax prob under its parent's head)."""
        B, N = last_tokens.shape[0], tree.n_nodes
        dev = last_tokens.device
        arrays = tree_arrays(tree, dev)
        start = plan["d_slot"][:, 0]                                                    # [B] -1 inactive
        nodes = torch.zeros(B, N + 1, dtype=torch.long, device=dev)
        nodes[:, 0] = last_tokens
        conf = torch.zeros(B, N, dtype=torch.float32, device=dev)
        out_of = {}                       # internal node -> its forward's recycled output [B, H]
        for d in range(tree.max_depth):
            at = [int(v) for v in tree.internal if tree.depth[v] == d]
            at_t, rows = arrays["at"][d], arrays["rows"][d]                             # [T] on the device
            tok = nodes[:, at_t]                                                        # [B, T]
            if d == 0:
                hid = self._handoff(target_hidden)[:, None]                             # [B, 1, H]
            else:
                hid = torch.stack([out_of[int(tree.parent[v])] for v in at], 1)         # [B, T, H]
            out = self.mtp.forward(tok, hid, plan["d_rope"][:, rows], plan["d_slot"][:, rows], self.kv, self.embed,
                                   length=lengths["draft"], zero_at=self.zero_at,
                                   tree=(start, arrays["blocks"][d]))                     # [B, T, H]
            z = self.mtp.logits(out, self.lm_head)                                      # [B, T, V] fp32
            p, ids = torch.softmax(z, dim=-1).topk(tree.topk, dim=-1)                   # [B, T, k]
            for t, v in enumerate(at):
                out_of[v] = self._recycle(out[:, t])
                for c in tree.children(v):
                    nodes[:, int(c)] = ids[:, t, int(tree.rank[c])]
                    conf[:, int(c) - 1] = p[:, t, int(tree.rank[c])]
        return nodes, conf

    def compact_tree(self, path, tree, base) -> None:
        """Device: move the accepted path's drafter rows (path [B, D+1], tree_accept.greedy_walk)
        onto the slots a linear propose of its tokens would have used (row of depth d at base + d;
        base [B]: the propose's first row, the plan's d_slot[:, 0], -1 inactive)."""
        src, dst = path_slots(path, base, tree_arrays(tree, path.device)["row_of"])
        self.kv.move_slots(src, dst)

    def after_verify_tree(self, accepted: np.ndarray, best: np.ndarray, tree, active: np.ndarray) -> None:
        """Host: book the compacted rows as `after_verify` books a linear propose of K' drafts with
        `accepted` of them taken, K' = accepted + 1 where the path's last node (best) had a forward
        (an internal node: the row of the draft past the path) and accepted where it is a leaf."""
        act = np.nonzero(active & (self.last_drafted > 0))[0]
        for b in act:                     # forget the tree's rows, book the path's, trim as linear
            m, b0, a = int(self.last_drafted[b]), int(self.tree_base[b]), int(accepted[b])
            k = a + int(tree.row_of[best[b]] >= 0)
            key0 = self.row_key[b, b0]
            self.row_key[b, b0:b0 + m] = -1
            self.row_target[b, b0:b0 + m] = False
            keep = k - int(trim_table(self.row_space, k, self.refeed)[a])
            self.row_key[b, b0:b0 + keep] = key0 + np.arange(keep)
            self.row_target[b, b0] = keep > 0
            self.rows[b] = b0 + keep
            self.last_drafted[b] = 0


@functools.lru_cache(maxsize=32)
def tree_arrays(tree, device) -> dict:
    """The tree's constant device arrays for its draft, made once per (tree, device): a step (a CUDA
    graph's capture above all) copies nothing from the host (indexing by a host list copies it to
    the device: refused inside a capture), and a later wave replays the graphs the first captured,
    which read these by address. Per depth d: at[d] [T_d] its internal nodes, rows[d] [T_d] their
    propose rows, blocks[d] [T_d, M] their ancestor mask over the propose's rows; row_of [N+1]."""
    anc = tree.ancestors[np.ix_(tree.internal, tree.internal)]                          # [M, M]
    at = [np.array([v for v in tree.internal if tree.depth[v] == d], dtype=np.int64) for d in range(tree.max_depth)]
    return {"at": [torch.as_tensor(a, device=device) for a in at],
            "rows": [torch.as_tensor(tree.row_of[a], device=device) for a in at],
            "blocks": [torch.as_tensor(anc[tree.row_of[a]], device=device) for a in at],
            "row_of": torch.as_tensor(tree.row_of, device=device)}

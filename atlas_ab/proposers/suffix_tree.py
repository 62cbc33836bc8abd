"""A suffix tree with counts, as suffix decoding speculates from it (Arctic Inference's `SuffixTree`).

Our own, written because no library we use has one. Arctic's is a path-compressed C++ tree
(`csrc/suffix_decoding/suffix_tree.cc`, snowflakedb/ArcticInference); this is the same tree
uncompressed, a trie of integer node ids: every substring of length <= max_depth of the sequences it
holds is a node, its count the substring's occurrences. Compression changes none of the numbers
speculation reads: along one of Arctic's edges the count does not change, so each step there
multiplies the probability by exactly 1, as below.

  append(seq, t)   t extends every suffix of `seq` that began in the last max_depth tokens (the
                   root's count: tokens held)
  remove(seq)      every substring of `seq` uncounted; nodes reaching 0 dropped
  speculate        for match_len = 1 .. len(pattern) - 1 (the full pattern is never tried): the
                   node of the pattern's last match_len tokens (none: stop), then the path from
                   it taking the first child in Arctic's sibling order (below) while fewer than
                   min(max_spec_tokens, int(match_len * factor + offset + 1e-6)) tokens are drafted
                   and prob = prod count(child) / count(node) stays >= min_token_prob; score = the
                   drafts' probs summed; the best score wins, a later (longer) match on a tie.
                   Probabilities and scores in float32, as Arctic's.

Sibling order (Arctic Inference 0.3.0's `_increment_count` / `_decrement_count`, what vLLM 0.32's `suffix`
method runs): a node's children stay sorted by count, most frequent first, and ties keep the order the
moves leave: a new child goes last; a child whose count rises from c moves before the head of its
predecessor's group when that predecessor's count is c or c + 1 (first of the c + 1 group if the
predecessor had c + 1, last of it if the predecessor had c); one whose count falls from c, with a
successor at c, moves before the head of the next lower group (or to the end). Until 2026-12-04 ties went
to the child added first, which drafted otherwise at 38 of 2,052 steps against vLLM's
(docs/ci_gate.md, "vLLM, for real").
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Draft:
    """A speculation: its tokens, each one's estimated probability, their sum and the match it came from."""
    token_ids: list = field(default_factory=list)
    probs: list = field(default_factory=list)
    score: np.float32 = np.float32(0.0)
    match_len: int = 0


class SuffixTree:
    """The trie as integer node ids: kids[n] maps a token to the child's id, count[n] is the substring's
    occurrences, order[n] the children's tokens in Arctic's sibling order where n has two or more (the
    root's are never read: a path starts at a match of one token or more, and cost 6x the build). A
    dict of ints is not tracked by Python's cyclic garbage collector, and a node object would be: with a
    node per token x depth (~1M at B=64) every full collection walked them all, 0.2-4.8 s pauses inside
    live steps on the H200 (analysis/reports/families_ladder_h200_2026-12-04/README.md) and 8x the build
    time here (bench/bench_suffix_tree.py)."""

    ROOT = 0

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.kids: list[dict[int, int]] = [{}]
        self.count: list[int] = [0]
        self.order: dict[int, list[int]] = {}   # node -> its children's tokens in sibling order (>= 2 children)
        self.free: list[int] = []   # ids of dropped nodes, reused
        self.seqs: dict = {}        # seq id -> its tokens
        self.active: dict = {}      # seq id -> the nodes of its suffixes still under max_depth

    @property
    def root_count(self) -> int:
        """Tokens held."""
        return self.count[self.ROOT]

    def _node(self) -> int:
        if self.free:
            n = self.free.pop()
            self.count[n] = 0
            return n
        self.kids.append({})
        self.count.append(0)
        return len(self.count) - 1

    def _drop(self, n: int) -> None:
        """Node n and its subtree freed (their counts are 0: none is below its parent's)."""
        stack = [n]
        while stack:
            m = stack.pop()
            stack.extend(self.kids[m].values())
            self.kids[m].clear()
            self.order.pop(m, None)
            self.free.append(m)

    def _add_child(self, node: int, token: int) -> int:
        """A new child of `node` for `token`, last among its siblings."""
        kids = self.kids[node]
        child = kids[token] = self._node()
        if node == self.ROOT:           # a path never starts at the root (match_len >= 1): its order is not kept
            return child
        if len(kids) == 2:
            self.order[node] = list(kids)
        elif len(kids) > 2:
            self.order[node].append(token)
        return child

    def _bump(self, node: int, token: int, child: int) -> None:
        """count[child] += 1, moved among its siblings as Arctic's _increment_count moves it."""
        c, order = self.count[child], self.order.get(node)
        if order is not None:
            i = order.index(token)
            if i > 0:
                count, kids = self.count, self.kids[node]
                pc = count[kids[order[i - 1]]]
                if pc <= c + 1:             # the predecessor has c or c + 1: before its group's head
                    j = i - 1
                    while j > 0 and count[kids[order[j - 1]]] == pc:
                        j -= 1
                    del order[i]
                    order.insert(j, token)
        self.count[child] = c + 1

    def _lower(self, node: int, token: int, child: int) -> None:
        """count[child] -= 1 (to >= 1), moved as Arctic's _decrement_count moves it."""
        c, order = self.count[child], self.order.get(node)
        if order is not None:
            i = order.index(token)
            count, kids = self.count, self.kids[node]
            if i + 1 < len(order) and count[kids[order[i + 1]]] == c:   # before the next lower group's head
                k = i + 1
                while k < len(order) and count[kids[order[k]]] == c:
                    k += 1
                del order[i]
                order.insert(k - 1, token)
        self.count[child] = c - 1

    def _unlink(self, node: int, token: int) -> None:
        """`token`'s child of `node` out of the tree with its subtree."""
        child = self.kids[node].pop(token)
        order = self.order.get(node)
        if order is not None:
            order.remove(token)
            if len(order) < 2:
                del self.order[node]
        self._drop(child)

    def append(self, seq, token: int) -> None:
        tokens = self.seqs.setdefault(seq, [])
        active = self.active.setdefault(seq, deque())
        kids, count = self.kids, self.count
        active.append(self.ROOT)
        count[self.ROOT] += 1
        if len(active) > self.max_depth:
            active.popleft()
        tokens.append(token)
        for i, node in enumerate(active):
            child = kids[node].get(token)
            if child is None:
                child = self._add_child(node, token)
                count[child] = 1
            else:
                self._bump(node, token, child)
            active[i] = child

    def extend(self, seq, tokens) -> None:
        for t in tokens:
            self.append(seq, int(t))

    def remove(self, seq) -> None:
        tokens = self.seqs.pop(seq)
        self.active.pop(seq, None)
        kids, count = self.kids, self.count
        for start in range(len(tokens)):
            node = self.ROOT
            count[node] -= 1
            for t in tokens[start:start + self.max_depth]:
                child = kids[node][t]
                if count[child] == 1:
                    self._unlink(node, t)
                    break
                self._lower(node, t, child)
                node = child

    def node_of(self, pattern) -> int | None:
        node = self.ROOT
        for t in pattern:
            node = self.kids[node].get(int(t))
            if node is None:
                return None
        return node

    def path(self, node: int, max_tokens: int, min_token_prob: float) -> Draft:
        """The most frequent continuation from `node` (Arctic's `_speculate_path`)."""
        d = Draft()
        kids, count = self.kids, self.count
        prob, floor = np.float32(1.0), np.float32(min_token_prob)
        while len(d.token_ids) < max_tokens and prob >= floor:
            if not kids[node]:
                break
            order = self.order.get(node)
            t = order[0] if order is not None else next(iter(kids[node]))     # the head of the siblings
            ch = kids[node][t]
            prob = np.float32(prob * (np.float32(count[ch]) / np.float32(count[node])))
            if prob < floor:
                break
            d.token_ids.append(t)
            d.probs.append(prob)
            d.score = np.float32(d.score + prob)
            node = ch
        return d

    def speculate(self, pattern, max_spec_tokens: int, max_spec_factor: float, min_token_prob: float,
                  max_spec_offset: float = 0.0) -> Draft:
        """The best-scoring continuation over every match length (Arctic's `SuffixTree::speculate`)."""
        best = Draft()
        factor, offset = np.float32(max_spec_factor), np.float32(max_spec_offset)
        for match_len in range(1, len(pattern)):
            node = self.node_of(pattern[len(pattern) - match_len:])
            if node is None:
                break
            cap = int(float(np.float32(np.float32(match_len) * factor) + offset) + 1e-6)
            d = self.path(node, max(min(max_spec_tokens, cap), 0), min_token_prob)
            if d.score >= best.score:
                best = d
                best.match_len = match_len
        return best

    def counts(self, pattern) -> dict:
        """{next token: count} after `pattern` (for tests and inspection)."""
        node = self.node_of(pattern)
        return {} if node is None else {t: self.count[ch] for t, ch in self.kids[node].items()}

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
                   it taking the most frequent child (ties: the child added first; Arctic's: its
                   map's order) while fewer than min(max_spec_tokens, int(match_len * factor + offset
                   + 1e-6)) tokens are drafted and prob = prod count(child) / count(node) stays >=
                   min_token_prob; score = the drafts' probs summed; the best score wins, a later
                   (longer) match on a tie. Probabilities and scores in float32, as Arctic's.
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
    """The trie as integer node ids: kids[n] maps a token to the child's id (insertion-ordered, so the
    first of the largest counts is the child added first), count[n] is the substring's occurrences. A
    dict of ints is not tracked by Python's cyclic garbage collector, and a node object would be: with a
    node per token x depth (~1M at B=64) every full collection walked them all, 0.2-4.8 s pauses inside
    live steps on the H200 (analysis/reports/families_ladder_h200_2026-12-04/README.md) and 8x the build
    time here (bench/bench_suffix_tree.py)."""

    ROOT = 0

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.kids: list[dict[int, int]] = [{}]
        self.count: list[int] = [0]
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
            self.free.append(m)

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
                child = kids[node][token] = self._node()
            count[child] += 1
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
                count[child] -= 1
                if count[child] == 0:
                    del kids[node][t]
                    self._drop(child)
                    break
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
            best = None
            for t, ch in kids[node].items():          # the first of the largest counts
                if best is None or count[ch] > count[best[1]]:
                    best = (t, ch)
            if best is None:
                break
            prob = np.float32(prob * (np.float32(count[best[1]]) / np.float32(count[node])))
            if prob < floor:
                break
            d.token_ids.append(best[0])
            d.probs.append(prob)
            d.score = np.float32(d.score + prob)
            node = best[1]
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

"""A suffix tree with counts, as suffix decoding speculates from it (Arctic Inference's `SuffixTree`).

Our own, written because no library we use has one. Arctic's is a path-compressed C++ tree
(`csrc/suffix_decoding/suffix_tree.cc`, snowflakedb/ArcticInference); this is the same tree
uncompressed, a trie of dict nodes: every substring of length <= max_depth of the sequences it
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


class Node:
    __slots__ = ("count", "children")

    def __init__(self):
        self.count = 0
        self.children: dict[int, Node] = {}


@dataclass
class Draft:
    """A speculation: its tokens, each one's estimated probability, their sum and the match it came from."""
    token_ids: list = field(default_factory=list)
    probs: list = field(default_factory=list)
    score: np.float32 = np.float32(0.0)
    match_len: int = 0


class SuffixTree:
    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.root = Node()
        self.seqs: dict = {}        # seq id -> its tokens
        self.active: dict = {}      # seq id -> the nodes of its suffixes still under max_depth

    def append(self, seq, token: int) -> None:
        tokens = self.seqs.setdefault(seq, [])
        active = self.active.setdefault(seq, deque())
        active.append(self.root)
        self.root.count += 1
        if len(active) > self.max_depth:
            active.popleft()
        tokens.append(token)
        for i, node in enumerate(active):
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = Node()
            child.count += 1
            active[i] = child

    def extend(self, seq, tokens) -> None:
        for t in tokens:
            self.append(seq, int(t))

    def remove(self, seq) -> None:
        tokens = self.seqs.pop(seq)
        self.active.pop(seq, None)
        for start in range(len(tokens)):
            node = self.root
            node.count -= 1
            for t in tokens[start:start + self.max_depth]:
                child = node.children[t]
                child.count -= 1
                if child.count == 0:
                    del node.children[t]
                    break
                node = child

    def node_of(self, pattern) -> Node | None:
        node = self.root
        for t in pattern:
            node = node.children.get(int(t))
            if node is None:
                return None
        return node

    def path(self, node: Node, max_tokens: int, min_token_prob: float) -> Draft:
        """The most frequent continuation from `node` (Arctic's `_speculate_path`)."""
        d = Draft()
        prob, floor = np.float32(1.0), np.float32(min_token_prob)
        while len(d.token_ids) < max_tokens and prob >= floor:
            best = None
            for t, ch in node.children.items():       # the first of the largest counts
                if best is None or ch.count > best[1].count:
                    best = (t, ch)
            if best is None:
                break
            prob = np.float32(prob * (np.float32(best[1].count) / np.float32(node.count)))
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
        return {} if node is None else {t: ch.count for t, ch in node.children.items()}

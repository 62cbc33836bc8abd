"""Suffix decoding (vLLM's `suffix` method, Arctic Inference's SuffixDecodingCache): drafts from suffix trees.

vLLM 0.32's `vllm/v1/spec_decode/suffix_decoding.py`, `SuffixDecodingProposer.propose`, over
Arctic's `arctic_inference/suffix_decoding/cache.py`, `SuffixDecodingCache`, restated with our own
tree (proposers/suffix_tree.py):
  - a request is one turn of one document; its prompt is the context at the turn's start
  - a local tree per request over its prompt and its response so far; a global tree over the
    responses (never prompts) of the last max_cached_requests requests, FIFO, the in-flight
    ones' included (0: no global tree)
  - each propose, rows in order: the row's newly committed tokens appended to both trees (its
    response's), then its drafts: pattern = the context's last max_tree_depth tokens, speculated
    in the local and in the global tree with max_spec_tokens = K; the global's if its score is
    strictly greater. The match sets the row's K: at most max_spec_factor x match length.
  - a request that ended (its turn's last step) has its last tokens appended before any new
    request starts, as vLLM appends them in the propose after its last step
The global tree's order is the loop's: rows in order within a propose, proposes in step order,
waves in order; so replay, which runs the same steps, builds the same trees. A run that resumes
starts its global tree empty (vLLM's server restarts likewise), so a resumed suffix run is not
the uninterrupted one: the runner's shards each hold their own tree.
"""
from __future__ import annotations

import copy
from collections import OrderedDict

import numpy as np

from atlas_ab.proposers.host_drafts import HostDraftProposer
from atlas_ab.proposers.suffix_tree import SuffixTree


class SuffixCache:
    """Arctic's SuffixDecodingCache: local trees by request, one global tree of responses."""

    def __init__(self, max_tree_depth: int, max_cached_requests: int):
        self.depth, self.max_cached = max_tree_depth, max_cached_requests
        self.global_tree = SuffixTree(max_tree_depth)
        self.local: dict = {}
        self.cached: OrderedDict = OrderedDict()      # request -> in the global tree, oldest first

    def start(self, req, prompt) -> None:
        self.local[req] = SuffixTree(self.depth)
        self.local[req].extend(0, prompt)
        if self.max_cached != 0:
            self.cached[req] = True
            while len(self.cached) > self.max_cached:       # FIFO, never the request just started
                old = next(r for r in self.cached if r != req)
                del self.cached[old]
                if old in self.global_tree.seqs:
                    self.global_tree.remove(old)

    def stop(self, req) -> None:
        del self.local[req]

    def add(self, req, tokens) -> None:
        self.local[req].extend(0, tokens)
        if req in self.cached:
            self.global_tree.extend(req, tokens)

    def speculate(self, req, pattern, max_spec_tokens: int, factor: float, min_prob: float):
        pattern = pattern[-self.depth:]
        best = self.local[req].speculate(pattern, max_spec_tokens, factor, min_prob)
        other = self.global_tree.speculate(pattern, max_spec_tokens, factor, min_prob)
        return other if other.score > best.score else best


class SuffixProposer(HostDraftProposer):
    """Each row's request (turn) is found from its positions: a propose at a position other than
    the one its last verify left it at opens the row's next turn."""
    kind = "suffix"

    def __init__(self, max_tree_depth: int, max_spec_factor: float, min_token_prob: float,
                 max_cached_requests: int):
        self.factor, self.min_prob = max_spec_factor, min_token_prob
        self.cache = SuffixCache(max_tree_depth, max_cached_requests)
        self.requests = 0        # requests started over every wave: a request's global-tree key
        self.history = None

    def alloc(self, budgets: np.ndarray) -> None:
        super().alloc(budgets)
        self.req = [None] * self.B                          # each row's request (None: none open)
        self.fed = np.zeros(self.B, dtype=np.int64)         # its context's tokens in its trees
        self.pos = np.zeros(self.B, dtype=np.int64)         # its position at the last propose
        self.expect = np.full(self.B, -1, dtype=np.int64)   # its last committed token's position
        self.history = None

    def row_drafts(self, b: int, context: np.ndarray, num_drafts: int) -> np.ndarray:
        d = self.cache.speculate(self.req[b], context.tolist(), num_drafts, self.factor, self.min_prob)
        return np.asarray(d.token_ids, dtype=np.int64)

    def _feed(self, b: int, end: int) -> None:
        """Row b's committed tokens below `end` into its request's trees."""
        if end > self.fed[b]:
            self.cache.add(self.req[b], self.history[b, self.fed[b]:end].tolist())
            self.fed[b] = end

    def _stop(self, b: int) -> None:
        """Row b's request ended: its last tokens, then stopped."""
        self._feed(b, self.expect[b] + 1)
        self.cache.stop(self.req[b])
        self.req[b] = None

    def drafts_of(self, history, positions, num_drafts, active) -> dict:
        self.history, self.pos = history, positions.copy()
        opens = active & (positions != self.expect)
        for b in np.nonzero(opens)[0]:           # requests that ended at a turn's end: before any new one
            if self.req[b] is not None:
                self._stop(b)
        out = {}
        for b in range(self.B):
            if self.req[b] is not None:           # what the last step committed (a row done this turn too)
                self._feed(b, self.expect[b] + 1)
            if not active[b]:
                continue
            n = int(positions[b])
            if self.req[b] is None:               # the turn's prompt: the context before its first token
                self.req[b], self.requests = self.requests, self.requests + 1
                self.cache.start(self.req[b], history[b, :n].tolist())
                self.fed[b] = n
            self._feed(b, n + 1)
            out[b] = self.row_drafts(b, history[b, max(0, n + 1 - self.cache.depth):n + 1], num_drafts)
        return out

    def carried(self):
        """The global tree and the request count, copied (a wave run twice must see one state)."""
        return copy.deepcopy((self.cache, self.requests))

    def carry(self, state) -> None:
        self.cache, self.requests = copy.deepcopy(state)

    def after_verify(self, num_accepted: np.ndarray, active: np.ndarray) -> None:
        act = np.nonzero(active)[0]
        self.expect[act] = self.pos[act] + num_accepted[act] + 1

    def free(self) -> None:
        """The wave's last requests: their tails appended, then stopped (the global tree stays)."""
        if self.history is not None:
            for b in range(self.B):
                if self.req[b] is not None:
                    self._stop(b)

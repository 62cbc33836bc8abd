"""The suffix tree's host cost under Python's cyclic garbage collector: our trie of integer node ids
(`atlas_ab/proposers/suffix_tree.py`) against the same trie of node objects (what it was until
2026-12-04, restated below), each built from R sequences of L tokens at depth 24 with the collector on,
alternated in one process. Prints each one's build time, its worst single append (a full collection
lands inside one) and the ratio. The family ladder on the H200 saw the node objects' collections as
0.2-4.8 s pauses inside live suffix steps (analysis/reports/families_ladder_h200_2026-12-04/README.md).

    python bench/bench_suffix_tree.py             # 64 sequences x 800 tokens (B=64, 8 turns of 96)
"""
from __future__ import annotations

import argparse
import gc
import time
from collections import deque

import numpy as np

from atlas_ab.proposers.suffix_tree import SuffixTree

from common import dump_json


class _Node:
    __slots__ = ("count", "children")

    def __init__(self):
        self.count, self.children = 0, {}


class ObjectTrie:
    """The trie as it was: a node object per substring (tracked by the cyclic collector)."""

    def __init__(self, max_depth: int):
        self.max_depth, self.root, self.active = max_depth, _Node(), {}

    def append(self, seq, token: int) -> None:
        active = self.active.setdefault(seq, deque())
        active.append(self.root)
        self.root.count += 1
        if len(active) > self.max_depth:
            active.popleft()
        for i, node in enumerate(active):
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = _Node()
            child.count += 1
            active[i] = child


def build(make, seqs: np.ndarray) -> tuple[float, float]:
    """(seconds to append every token, the worst single append in ms), the collector on."""
    gc.collect()
    tree, worst, t0 = make(24), 0.0, time.perf_counter()
    for s, row in enumerate(seqs):
        for t in row.tolist():
            a = time.perf_counter()
            tree.append(s, t)
            worst = max(worst, time.perf_counter() - a)
    total = time.perf_counter() - t0
    del tree
    gc.collect()
    return total, worst * 1e3


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=800)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="4 sequences x 100 tokens, one rep (CI)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.smoke:
        a.seqs, a.tokens, a.reps = 4, 100, 1
    seqs = np.random.default_rng(0).integers(0, 4096, (a.seqs, a.tokens))
    res = {"smoke": a.smoke, "seqs": a.seqs, "tokens": a.tokens, "ids": [], "objects": []}
    for _ in range(a.reps):          # alternated: drift falls on both
        res["ids"].append(build(SuffixTree, seqs))
        res["objects"].append(build(ObjectTrie, seqs))
    ids, obj = (min(r[0] for r in res[k]) for k in ("ids", "objects"))
    wi, wo = (max(r[1] for r in res[k]) for k in ("ids", "objects"))
    print(f"{a.seqs} sequences x {a.tokens} tokens, depth 24, collector on, best of {a.reps}: node ids {ids:.2f} s "
          f"(worst append {wi:.1f} ms), node objects {obj:.2f} s (worst append {wo:.1f} ms): {obj / ids:.1f}x")
    res["ratio"] = obj / ids
    dump_json(a.json, res)
    return res


if __name__ == "__main__":
    main()

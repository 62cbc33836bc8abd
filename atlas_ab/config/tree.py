"""The TREE lever's value: a static draft tree, parsed and validated, and its shape (the parents,
depths and ranks, the ancestor mask a tree verify and a tree draft read).

Vocabulary:
  node      one draft of the tree; node 0 is the root, the last committed token t_n (not a draft)
  path      a node's address: the tuple of child ranks from the root, e.g. (1, 0) is the top-1
            child of the root's top-2 child (vLLM's `speculative_token_tree` convention,
            vllm/v1/attention/backends/tree_attn.py: nodes sorted by (depth, path), node i+1 is
            the i-th sorted path, the root is node 0)
  rank      a node's last path entry: which of its parent's top-k candidates it is (0 = argmax)
  depth     a node's path length; a node at depth d is verified at RoPE position n + d
  internal  a node with children: the drafter runs one forward at it (its top-k are its
            children); a leaf needs none
  N, D      the number of draft nodes and the tree's depth; a linear chain of K drafts is the
            tree ((0,), (0, 0), ...) with N = D = K

A tree is given as its paths, or as top-k per depth ("2,1": the root's top-2, then each of
those nodes' top-1), and refused in one AtlasError line naming the offending path when a path's
parent is missing, a path repeats or has a negative rank, or the tree is wider than the verify's
static shapes allow (more than MAX_NODES drafts, a rank at or past MAX_RANK). Torch-free: the
analysis reads trees too (`coverage --tree`); the device side of a tree's rows is tree_rows.py.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

import numpy as np

from atlas_ab import AtlasError

MAX_NODES = 8   # drafts per tree: the widest linear verify's (num_drafts' range), so the verify's shapes hold
MAX_RANK = 8    # a rank is a top-k index; the drafter's top-k is clamped at 8 as SHADOW_TOPK's is


@dataclass(frozen=True)
class TreeSpec:
    """A validated static tree. Arrays index nodes 0..N (node 0 the root)."""

    paths: tuple[tuple[int, ...], ...]   # [N] the draft nodes' paths, sorted by (depth, path)

    @functools.cached_property
    def parent(self) -> np.ndarray:
        """[N+1] int64: each node's parent (the root: -1)."""
        index = {p: i + 1 for i, p in enumerate(self.paths)}
        return np.array([-1] + [index.get(p[:-1], 0) for p in self.paths], dtype=np.int64)

    @functools.cached_property
    def depth(self) -> np.ndarray:
        """[N+1] int64: path length (the root: 0)."""
        return np.array([0] + [len(p) for p in self.paths], dtype=np.int64)

    @functools.cached_property
    def rank(self) -> np.ndarray:
        """[N+1] int64: the child rank (the root: 0)."""
        return np.array([0] + [p[-1] for p in self.paths], dtype=np.int64)

    @property
    def n_nodes(self) -> int:
        """N, the draft nodes (the verify reads N + 1 tokens)."""
        return len(self.paths)

    @property
    def max_depth(self) -> int:
        """D, the deepest path."""
        return int(self.depth.max())

    @property
    def topk(self) -> int:
        """The drafter's top-k a draft of this tree needs (the widest rank + 1)."""
        return int(self.rank[1:].max()) + 1

    @functools.cached_property
    def internal(self) -> np.ndarray:
        """[M] int64: the nodes with children, ascending (node 0 always); the drafter's forwards."""
        return np.unique(self.parent[1:])

    @functools.cached_property
    def row_of(self) -> np.ndarray:
        """[N+1] int64: an internal node's drafter row within the propose (its index in
        `internal`), -1 for a leaf."""
        r = np.full(self.n_nodes + 1, -1, dtype=np.int64)
        r[self.internal] = np.arange(len(self.internal))
        return r

    @functools.cached_property
    def rank0_child(self) -> np.ndarray:
        """[N+1] int64: each node's rank-0 child (its drafter's argmax), -1 where it has none."""
        c = np.full(self.n_nodes + 1, -1, dtype=np.int64)
        kids = np.nonzero(self.rank == 0)[0][1:]
        c[self.parent[kids]] = kids
        return c

    @property
    def is_linear(self) -> bool:
        return self.paths == tuple((0,) * d for d in range(1, self.n_nodes + 1))

    @functools.cached_property
    def ancestors(self) -> np.ndarray:
        """[N+1, N+1] bool: a[i, j] iff node j is node i or one of its ancestors (what node i's
        verify row attends to inside the tree, besides the committed context)."""
        n = self.n_nodes + 1
        a = np.eye(n, dtype=bool)
        for i in range(1, n):               # parents come first in (depth, path) order
            a[i] |= a[self.parent[i]]
        return a

    def children(self, node: int) -> np.ndarray:
        """The node's children, by rank."""
        c = np.nonzero(self.parent == node)[0]
        return c[np.argsort(self.rank[c], kind="stable")]

    def at_depth(self, d: int) -> np.ndarray:
        return np.nonzero(self.depth == d)[0]

    def describe(self) -> str:
        """The shape as one line: the paths, vLLM-style."""
        return "[" + ", ".join("(" + ", ".join(map(str, p)) + ("," if len(p) == 1 else "") + ")"
                               for p in self.paths) + "]"


def linear(k: int) -> TreeSpec:
    """The chain of k drafts as a tree."""
    return tree_from_paths([(0,) * d for d in range(1, k + 1)])


def tree_from_topk(per_depth) -> TreeSpec:
    """The full tree whose depth-d nodes each have per_depth[d-1] children (top-k per depth)."""
    ks = [int(k) for k in per_depth]
    if not ks or min(ks) < 1:
        raise AtlasError(f"tree top-k per depth {list(per_depth)!r}: each depth needs at least one child")
    paths, level = [], [()]
    for k in ks:
        level = [p + (r,) for p in level for r in range(k)]
        paths += level
    return tree_from_paths(paths)


def tree_from_paths(paths, max_nodes: int = MAX_NODES, max_rank: int = MAX_RANK) -> TreeSpec:
    """Validate and sort a list of paths (tuples of child ranks) into a TreeSpec."""
    seen: set = set()
    clean = []
    for p in paths:
        if not isinstance(p, (tuple, list)) or not p or not all(isinstance(r, int) and not isinstance(r, bool)
                                                               for r in p):
            raise AtlasError(f"tree path {p!r}: a path is a non-empty tuple of child ranks (ints)")
        p = tuple(p)
        if min(p) < 0:
            raise AtlasError(f"tree path {p}: a rank is negative")
        if max(p) >= max_rank:
            raise AtlasError(f"tree path {p}: rank {max(p)} is past the drafter's top-{max_rank}")
        if p in seen:
            raise AtlasError(f"tree path {p}: listed twice")
        seen.add(p)
        clean.append(p)
    if not clean:
        raise AtlasError("tree: no paths")
    for p in clean:
        if len(p) > 1 and p[:-1] not in seen:
            raise AtlasError(f"tree path {p}: its parent {p[:-1]} is missing")
    if len(clean) > max_nodes:
        ordered = sorted(clean, key=lambda q: (len(q), q))
        raise AtlasError(f"tree path {ordered[max_nodes]}: the tree has {len(clean)} drafts, wider than the "
                         f"verify's static {max_nodes} (num_drafts' range)")
    return TreeSpec(tuple(sorted(clean, key=lambda q: (len(q), q))))


def parse_tree(spec) -> TreeSpec:
    """A tree from its config form: a list of paths (or its Python literal, "[(0,), (1,), (0, 0)]"),
    or top-k per depth as "topk:2,1" (or a list of ints)."""
    if isinstance(spec, str):
        s = spec.strip()
        if s.startswith("topk:"):
            try:
                return tree_from_topk(int(x) for x in s[5:].split(","))
            except ValueError:
                raise AtlasError(f"tree {spec!r}: topk: takes comma-separated ints, e.g. topk:2,1") from None
        try:
            spec = ast.literal_eval(s)
        except (ValueError, SyntaxError):
            raise AtlasError(f"tree {spec!r}: neither a list of paths nor topk:K1,K2,...") from None
    spec = list(spec)
    if spec and all(isinstance(x, int) and not isinstance(x, bool) for x in spec):
        return tree_from_topk(spec)
    return tree_from_paths(spec)

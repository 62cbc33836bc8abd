"""The target side of a wave: what the loop asks of the target model, in two modes.

`Wave` (loop.py) drives the drafter's state machine; it asks its target for two
things only:

  prefill(turn, history, start, count) -> hid [B, T, H], first [B]
      the hiddens of positions start .. start+count-1 of each sequence (the turn's
      new context, from the pending token on) and the target's next token after them
  verify(vtok, pos, slots, length, tree=None) -> vh [B, K+1, H], target [B, K+1]
      the hiddens and argmaxes at positions n .. n+K for inputs [t_n, d1 .. dK]; a tree arm's
      (tree: (start [B], ancestors [N+1, N+1])) for its N+1 nodes at positions by depth

`LiveTarget` runs the trunk's forwards on its own KV (live mode, the only source
of timings). `ReplayTarget` reads both from a stored target-only greedy (or
sampled) trajectory (trajectory.py), so a wave costs no trunk forward at all; the
loop, the proposers and the telemetry are the same code in both modes.

A sampled run asks for logits instead of argmaxes (`verify_logits`, `prefill_logits`; a tree arm's
verify_logits takes `tree=` as verify does: live only, a sampled tree is not replayed);
its replay asks for the trajectory's tokens and the target's logits along it (`path`,
`path_logits`: the head applied to the stored hiddens), which the coupled drafts need.

What replay cannot know: a live verify's argmaxes and hiddens past the first
rejected draft (in a tree: at a node with a rejected node on its path) are
computed from a wrong token. Nothing downstream reads them (acceptance is a
cumulative product that stops at the first mismatch, a tree's greedy walk one
that stops at it along each path; the commit, `last_hidden`, the ring writes and
ORACLE_P2 use depths <= the accepted ones), so replay writes -1 for those
argmaxes and zero rows for those hiddens, which makes any accidental use visible
instead of plausible. A node the walk accepts has every node on its path equal to
the trajectory, so its parent's argmax is known: a tree arm's replayed paths are
its live ones wherever live keeps to the trajectory.
"""
from __future__ import annotations

import numpy as np
import torch

from atlas_ab import AtlasError
from atlas_ab.runtime.batch import ragged_window
from atlas_ab.runtime.graphs import StaticBuffers, StepGraphs
from atlas_ab.runtime.kernels.top1 import argmax

#: The argmax replay writes where the live verify's was conditioned on a rejected draft.
UNKNOWN = -1


def known_rows(vtok: torch.Tensor, at: torch.Tensor, ancestors: torch.Tensor) -> torch.Tensor:
    """[B, A] bool: the verify rows whose argmax replay knows. Row i (the root t_n, or a draft)
    matches when its token vtok [B, A] is the trajectory's at its position, `at` [B, A]; the root
    (row 0) always does, it is committed. Row i is known when every row on its path matched:
    ancestors [A, A] bool, a[i, j] iff row j is row i or one of its ancestors (a K-chain's is
    lower-triangular: depth j is known while d1 .. dj all matched)."""
    match = vtok == at                                                          # [B, A]
    match[:, 0] = True                                                          # the root is committed
    return ~((~match)[:, None, :] & ancestors[None]).any(dim=-1)                # [B, A]


class LiveTarget:
    """Live mode: the trunk's own prefill and verify forwards on its KV pool."""

    live = True

    def __init__(self, trunk, graphs: bool = False, capture: bool | None = None, fuse: bool = True,
                 features: tuple = ()):
        """graphs: the wave runs its steps at static shapes, captured as CUDA graphs on the GPU
        (`capture`: False keeps the static shapes but runs them eagerly, to check the capture).
        fuse: on the GPU at static shapes, the steps' bookkeeping runs compiled (runtime/fusion.py).
        features: the drafter's `feature_layers`: the hiddens handed on are those layers' residual
        streams, concatenated ([.., len * H]); () = the last layer's output."""
        self.trunk = trunk
        p = next(trunk.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.features = tuple(features)
        self.hidden_size = trunk.args.hidden_size * (len(self.features) or 1)
        self.graphs = graphs
        self.capture = graphs and self.device.type == "cuda" if capture is None else capture
        # one target serves a run's waves: its step graphs, the KV pool and the waves' state
        # buffers they read are kept while the next wave's shapes match (Wave binds them)
        self.step_graphs = StepGraphs(graphs, self.capture, fuse)
        self.buffers = StaticBuffers()
        self.kv = None

    def alloc(self, budgets: np.ndarray) -> None:
        caps = np.asarray(budgets).tolist()
        if self.kv is None or self.kv.capacities != caps:
            self.kv = self.trunk.new_kv(caps)

    def free(self) -> None:
        if not self.graphs:          # kept at static shapes: the next wave's graphs read it
            self.kv = None

    def full_length(self) -> int:
        return self.kv.max_capacity

    def _t(self, x) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)

    def _forward(self, tok, pos, slots, length, tree=None):
        """(the last layer's hidden [B, T, H], the hidden the drafter is handed [B, T, F])."""
        if not self.features:
            h = self.trunk.forward(tok, pos, slots, self.kv, length=length, tree=tree)
            return h, h
        return self.trunk.forward_features(tok, pos, slots, self.kv, self.features, length=length, tree=tree)

    def prefill(self, turn: int, history: np.ndarray, start: np.ndarray, count: np.ndarray):
        tok, pos, slots, length = ragged_window(history, start, count)
        h, hid = self._forward(self._t(tok), self._t(pos), self._t(slots), length)
        last = h[torch.arange(len(start), device=self.device), self._t(count - 1)]
        return hid, argmax(self.trunk.logits(last[:, None], fp32=False)[:, 0])

    def verify(self, vtok, pos, slots, length: int, tree=None):
        """Target forward over [t_n, d1..dK] (or [t_n] for a DRAFT_CONF serial step): hiddens and
        argmaxes per depth. Device only: the loop captures it inside its step. tree: (start [B],
        ancestors [N+1, N+1]) for a tree's nodes (pos by depth, slots by node id; model.forward)."""
        h, vh = self._forward(vtok, pos, slots, length, tree)
        return vh, argmax(self.trunk.logits(h, fp32=False))

    def verify_logits(self, vtok, pos, slots, length: int, tree=None):
        """The verify of a sampled run: hiddens [B, K+1, H] and logits [B, K+1, V] (float32); tree:
        a tree's nodes under its mask, as `verify` takes it ([B, N+1, ...] then)."""
        h, vh = self._forward(vtok, pos, slots, length, tree)
        return vh, self.trunk.logits(h)

    def prefill_logits(self, turn: int, history: np.ndarray, start: np.ndarray, count: np.ndarray):
        """The prefill of a sampled run: hiddens [B, T, H] and the logits [B, V] after the context."""
        tok, pos, slots, length = ragged_window(history, start, count)
        h, hid = self._forward(self._t(tok), self._t(pos), self._t(slots), length)
        last = h[torch.arange(len(start), device=self.device), self._t(count - 1)]
        return hid, self.trunk.logits(last[:, None])[:, 0]


class ReplayTarget:
    """Replay mode: one wave's stored trajectory (`trajectory.Trajectory`) on the device.

    The verify's argmax at depth j is the greedy path's token at position n+j+1
    (inside the turn the committed text, past the turn's last token the stored
    continuation), as long as the drafts before depth j matched that path;
    after the first mismatch it is UNKNOWN (a tree's node: as long as every node
    on its path matched). Hidden rows are the stored ones at positions up to the
    turn's last token, zero where the argmax is UNKNOWN. No KV pool (`kv` None):
    a tree step compacts the drafter's rows only."""

    live = False
    kv = None                    # no trunk forward: no target KV to compact after a tree verify

    def __init__(self, traj, device, logits=None, graphs: bool = False, capture: bool | None = None):
        """logits: the trunk's head (hidden [..., H] -> logits [..., V]), for a sampled trajectory.
        graphs: the wave's steps at static shapes, captured as CUDA graphs on the GPU (as a live
        target's: `capture` False runs them eagerly, to check the capture); the verify is a gather
        keyed by the turn, which it reads from the device (`turn_t`), so one graph serves every turn.
        Eager, a step launched its ~100 kernels from Python: 5-7 ms a step, most of a claims arm
        (bench/RESULTS.md, "Time to a verdict"). The graphs are this target's: one wave's."""
        self.device = torch.device(device)
        self.graphs = graphs
        self.capture = graphs and self.device.type == "cuda" if capture is None else capture
        self.step_graphs = StepGraphs(graphs, self.capture, fuse=False)
        self.buffers = StaticBuffers()
        self.traj = traj
        self.logits = logits
        self.turn_t = torch.zeros(1, dtype=torch.long, device=self.device)    # [1] the turn, as a step reads it
        self.hiddens = traj.hiddens.to(self.device)
        if self.hiddens.dim() != 3:
            raise AtlasError("the stored trajectory holds no hiddens (built without them)")
        self.dtype = self.hiddens.dtype
        self.hidden_size = self.hiddens.shape[-1]
        self.argmax = torch.as_tensor(traj.argmax, device=self.device).long()      # [B, L]
        self.ext = torch.as_tensor(traj.ext, device=self.device).long()            # [B, turns, X]
        self.ends = torch.as_tensor(traj.turn_end, device=self.device)             # [B, turns]
        self.ext_hiddens = None if traj.ext_hiddens is None else traj.ext_hiddens.to(self.device)  # [B, turns, X, H]

    def alloc(self, budgets: np.ndarray) -> None:
        if len(budgets) != self.traj.batch:
            raise AtlasError(f"the stored trajectory holds {self.traj.batch} sequences, the wave {len(budgets)}")

    def free(self) -> None:
        pass

    def full_length(self) -> int:
        return self.hiddens.shape[1]

    def prefill(self, turn: int, history: np.ndarray, start: np.ndarray, count: np.ndarray):
        self.turn_t.fill_(turn)
        B = len(start)
        n = start + count
        # the loop built this context from the wave's documents and its own commits: it must be the stored one
        stored = self.traj.tokens
        L = stored.shape[1]
        W, Wc = int(n.max()), min(int(n.max()), L)
        differ = np.arange(W)[None, :] < n[:, None]             # [B, W]: in each context; past L never stored
        differ[:, :Wc] &= history[:, :Wc] != stored[:, :Wc]
        if differ.any():
            b = int(np.nonzero(differ.any(axis=1))[0][0])
            bad = int(np.nonzero(differ[b])[0][0])
            raise AtlasError(f"replay: sequence {b} (doc {int(self.traj.doc_ids[b])}) turn {turn} position "
                             f"{bad}: the context is not the stored trajectory's")
        cols = np.minimum(start[:, None] + np.arange(int(count.max()))[None, :], L - 1)
        hid = self.hiddens[torch.arange(B, device=self.device)[:, None], torch.as_tensor(cols, device=self.device)]
        first = torch.as_tensor(stored[np.arange(B), np.minimum(n, L - 1)], device=self.device).long()
        return hid, first

    def path(self, pos: torch.Tensor) -> torch.Tensor:
        """[B, A] the trajectory's token after each position pos [B, A]: the stored argmax (or
        sampled token) inside the turn, the continuation past its end."""
        ar = torch.arange(pos.shape[0], device=self.device)[:, None]
        end = self._end()                                                        # [B, 1] the turn's last token
        X = self.ext.shape[-1]
        return torch.where(pos <= end, self.argmax[ar, torch.minimum(pos, end)],
                           self.ext[ar, self.turn_t, (pos - end).clamp(0, X - 1)])

    def _end(self) -> torch.Tensor:
        """[B, 1] the position of the turn's last token (the turn read from the device)."""
        return self.ends.index_select(1, self.turn_t)

    def path_logits(self, pos: torch.Tensor) -> torch.Tensor:
        """[B, A, V] the target's logits after each position pos [B, A] of the trajectory, from its
        stored hiddens (past the turn's end, the continuation's); a sampled trajectory only."""
        if self.logits is None or self.ext_hiddens is None:
            raise AtlasError("replay under sampling needs a sampled trajectory (with its continuation's "
                             "hiddens) and the trunk's head")
        ar = torch.arange(pos.shape[0], device=self.device)[:, None]
        end = self._end()
        L, X = self.hiddens.shape[1], self.ext_hiddens.shape[2]
        h = torch.where((pos <= end)[..., None], self.hiddens[ar, pos.clamp(0, L - 1)],
                        self.ext_hiddens[ar, self.turn_t, (pos - end).clamp(0, X - 1)])
        return self.logits(h)

    def verify(self, vtok, pos, slots, length: int, tree=None):
        """The verify's hiddens [B, A, H] and argmaxes [B, A] from the trajectory, for inputs vtok at
        positions pos [B, A]: a K-chain's [t_n, d1..dK] at n..n+K, or (tree: (start [B], ancestors
        [A, A] bool), as `LiveTarget.verify` takes it) a tree's nodes at positions by depth. A node
        (row) matches when its token is the trajectory's at its position (the root always); its
        argmax is known when every node on its path matched (`known_rows`), UNKNOWN otherwise."""
        B, A = pos.shape
        ar = torch.arange(B, device=self.device)[:, None]
        end = self._end()                                                        # the turn's last token
        inside = pos <= end
        path = self.path(pos)
        # a K-chain is the one-path tree: each depth's ancestors are the depths before it
        anc = tree[1] if tree is not None else torch.ones(A, A, dtype=torch.bool, device=self.device).tril()
        known = known_rows(vtok, self.path((pos - 1).clamp(min=0)), anc)         # [B, A]
        target = torch.where(known, path, UNKNOWN)
        L = self.hiddens.shape[1]
        vh = self.hiddens[ar, pos.clamp(0, L - 1)]
        vh = torch.where((known & inside)[..., None], vh, 0)
        return vh, target

"""Test helpers for replay mode: run an arm live or replayed, and harvest a live run's
own target outputs into a Trajectory (so a replay of it can be compared bit for bit)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from atlas_ab.proposers import registry
from atlas_ab.proposers.draft_model import DraftModelProposer
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.targets import LiveTarget, ReplayTarget
from atlas_ab.speculative.trajectory import Trajectory
from atlas_ab.telemetry.fingerprint import fingerprint_rows

#: the replay tests' workload (tests/speculative/conftest.py): B documents, G tokens a turn
REPLAY_G, REPLAY_B = 10, 4


#: the weightless families, each with the levers its tests run at (short n-grams: the tiny docs repeat little)
WEIGHTLESS = {"ngram": {"prompt_lookup_min": 1, "prompt_lookup_max": 3}, "suffix": {}}


def proposer(models, arm, draft=None):
    trunk, mtp = models
    if arm.proposer in WEIGHTLESS:       # no weights: the registry's builder reads only the arm
        return registry.build(registry.Target(ck=None, model=None, arm=arm, device=None, dtype=None)).proposer
    if arm.proposer == "draft_model":
        return DraftModelProposer(draft)
    return MTPProposer(trunk, mtp, arm.row_space, arm.refeed)


def tables(trace):
    steps = trace.steps.table().to_pandas()
    events = (trace.events.table().to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
              if trace.events is not None else None)
    return steps, events


def run(models, arm, docs, G, target=None, draft=None, inspect=None, hasher=fingerprint_rows):
    """One wave of `arm`; target None = live. Returns (steps, events, trace, wave)."""
    wave = Wave(target if target is not None else LiveTarget(models[0]), proposer(models, arm, draft), arm, docs, G,
                fingerprint_rows=hasher)
    if inspect is not None:
        wave.on_step = lambda *a: inspect(wave)
    trace = wave.run()
    return (*tables(trace), trace, wave)


class HashedRows:
    """A fingerprint_rows that keeps the BF16 rows it hashed: the events' fp rows in table order,
    then their fp2 rows (telemetry/events.py hashes a wave's rows in one call)."""

    def __init__(self):
        self.calls: list[torch.Tensor] = []

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(x.detach().clone())
        return fingerprint_rows(x)

    @property
    def rows(self) -> torch.Tensor:
        return torch.cat(self.calls)


class RecordingTarget(LiveTarget):
    """The live target, keeping every prefill and verify output in time order (a verify's with its
    rows' ancestor mask: a tree's, or a K-chain's lower-triangular one)."""

    def __init__(self, trunk):
        super().__init__(trunk)
        self.log = []

    def prefill(self, turn, history, start, count):
        hid, first = super().prefill(turn, history, start, count)
        self.log.append(("prefill", turn, start.copy(), count.copy(), hid.clone(), first.clone()))
        return hid, first

    def verify(self, vtok, pos, slots, length, tree=None):
        vh, target = super().verify(vtok, pos, slots, length, tree=tree)
        A = vtok.shape[1]
        anc = tree[1].cpu().numpy() if tree is not None else np.tril(np.ones((A, A), dtype=bool))   # [A, A]
        self.log.append(("verify", vtok.clone(), pos.clone(), slots.clone(), vh.clone(), target.clone(), anc))
        return vh, target


def row_parents(anc: np.ndarray) -> np.ndarray:
    """[A] each verify row's parent (the root: 0) from its ancestor mask [A, A] (rows sorted by
    depth: the parent is the strict ancestor of the highest id)."""
    strict = anc & ~np.eye(len(anc), dtype=bool)
    return np.array([np.nonzero(r)[0].max() if r.any() else 0 for r in strict], dtype=np.int64)


def harvest(rec: RecordingTarget, wave: Wave, G: int, extend: int) -> Trajectory:
    """The trajectory a live wave's own target computed: for every position, the LAST hidden the
    target computed for it on the committed path (the one the loop consumed), the argmaxes on
    the path, and past each turn's end what the verify saw there. Positions the live run never
    computed hold NaN hiddens and argmax -2, so a replay that needs one differs visibly."""
    B = wave.B
    L = int(wave.n_tok.max())
    tokens = np.where(np.arange(L)[None, :] < wave.n_tok[:, None], wave.history[:, :L], -1).astype(np.int32)
    H = rec.hidden_size
    hiddens = torch.full((B, L, H), float("nan"), dtype=rec.dtype)
    argmax = np.full((B, L), -2, dtype=np.int32)
    turns = len(wave.docs[0].chunks)
    ext = np.full((B, turns, extend), -2, dtype=np.int32)
    gen_start = np.zeros((B, turns), dtype=np.int64)
    for entry in rec.log:
        if entry[0] == "prefill":
            _, t, start, count, hid, first = entry
            gen_start[:, t] = start + count
            for b in range(B):
                hiddens[b, start[b]:start[b] + count[b]] = hid[b, :count[b]]
                argmax[b, start[b] + count[b] - 1] = int(first[b])
            turn = t
            continue
        _, vtok, pos, slots, vh, target, anc = entry
        vtok, pos, target = vtok.numpy(), pos.numpy(), target.numpy()
        parent = row_parents(anc)                                                    # [A]
        for b in np.nonzero(slots[:, 0].numpy() >= 0)[0]:
            end = gen_start[b, turn] + G - 1
            on_path = np.zeros(pos.shape[1], dtype=bool)                             # [A] rows accepted so far
            for j in range(pos.shape[1]):
                q = parent[j]
                on_path[j] = j == 0 or (on_path[q] and vtok[b, j] == target[b, q])
                if not on_path[j]:
                    continue            # a rejected row, or one past it: conditioned on a wrong token
                p = pos[b, j]
                if p <= end:
                    hiddens[b, p] = vh[b, j]
                    argmax[b, p] = target[b, j]
                if p >= end:
                    ext[b, turn, p - end] = target[b, j]
    return Trajectory(doc_ids=wave.doc_ids.copy(), tokens=tokens, argmax=argmax, hiddens=hiddens, ext=ext,
                      gen_start=gen_start, margins=np.zeros((B, L, 2), np.float32), gen_tokens=G)


def replay_target(traj):
    return ReplayTarget(traj, "cpu")

"""The DraftProposer protocol, after the reference engine's trait (docs/reference_engine.md), batched first.

Every method acts on all B sequences of a batch at once; `active` says which
sequences take part (the others keep their state untouched). A per-sequence
call is the B = 1 case. State is allocated per sequence from its own token
budget (the reference engine's `alloc_state_for`), never from a global maximum.

Host/device split: token ids, drafts and hiddens stay on the device; the row
bookkeeping (row counts, pair keys, which rows carry a target hidden) is host
numpy, because the host learns the accepted counts once per step anyway and
the bookkeeping is what tests and fingerprints inspect. So a propose is two calls:
`plan_propose` (host: books the rows, returns their slots and RoPE positions as int64
arrays) and `draft` (device, static shapes: the loop captures it with the verify in one
graph); a catch-up feed likewise is `plan_rows` then `write_rows` (capabilities.CatchupFeed).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional, Protocol

import numpy as np
import torch

from atlas_ab.runtime.kernels.top1 import top1


@dataclass
class Proposal:
    drafts: torch.Tensor                 # [B, K] long
    conf: torch.Tensor                   # [B, K] float32: top-1 softmax prob per depth
    topk_ids: Optional[torch.Tensor]     # [B, K, k] (SHADOW_TOPK) or None
    topk_probs: Optional[torch.Tensor]
    q: Optional[torch.Tensor] = None     # [B, K, V] float32: the draft distributions (drawn drafts only)
    #: [B] long: how many of the row's K drafts are real (a family whose K varies per step: n-gram,
    #: suffix); the verify accepts at most that many and the row's `k` is it. None: all K are
    n_valid: Optional[torch.Tensor] = None

    @property
    def chain_conf(self) -> torch.Tensor:
        """min top-1 prob across one propose's drafts (the reference engine's chain confidence)."""
        return self.conf.min(dim=1).values


class DraftChain:
    """Collects one propose's per-depth outputs (the draft, its top-1 prob, SHADOW_TOPK's
    candidates) and stacks them into a Proposal; both proposers build theirs with it."""

    def __init__(self, topk: int):
        self.topk = topk
        self.drafts, self.confs, self.ids, self.probs, self.qs = [], [], [], [], []

    def add(self, draft: torch.Tensor, conf: torch.Tensor, ids: torch.Tensor, probs: torch.Tensor,
            q: Optional[torch.Tensor] = None) -> None:
        # no clones: each depth's outputs are fresh tensors (inside a step's graph too) and the stacks copy
        self.drafts.append(draft)
        self.confs.append(conf)
        if self.topk:
            self.ids.append(ids)
            self.probs.append(probs)
        if q is not None:
            self.qs.append(q)

    def proposal(self) -> Proposal:
        k = self.topk
        return Proposal(drafts=torch.stack(self.drafts, 1), conf=torch.stack(self.confs, 1),
                        topk_ids=torch.stack(self.ids, 1) if k else None,
                        topk_probs=torch.stack(self.probs, 1) if k else None,
                        q=torch.stack(self.qs, 1) if self.qs else None)


class Draws(Protocol):
    """How a drafter that samples picks its drafts (speculative/draws.py): `q` turns its head's
    logits [B, V] into the draft distribution, `draw(i, q)` picks the draft of 0-based depth i."""

    def q(self, logits: torch.Tensor) -> torch.Tensor: ...

    def draw(self, i: int, q: torch.Tensor) -> torch.Tensor: ...


def drawn(draws: Optional[Draws], i: int, logits: Optional[torch.Tensor], draft: torch.Tensor):
    """(draft, q) of depth i: the head's argmax and no q without draws; else q of the head's
    logits [B, V] and the draft drawn from it."""
    if draws is None:
        return draft, None
    q = draws.q(logits)
    return draws.draw(i, q), q


def head_outputs(logits: torch.Tensor, topk: int):
    """(conf, draft, topk ids, topk probs) of a drafter head's logits [B, V]: the greedy draft,
    its softmax prob (DRAFT_CONF's chain confidence is the min over depths), and SHADOW_TOPK's
    candidates (the draft itself when topk = 0)."""
    probs = torch.softmax(logits.float(), dim=-1) if topk else None
    conf, draft = top1(logits, probs)     # one pass over the logits on the fast path (runtime/kernels/top1.py)
    p, ids = probs.topk(topk, dim=-1) if topk else (conf, draft)
    return conf, draft, ids, p


@torch.no_grad()
def plan_and_draft(proposer, history, last_tokens, target_hidden, positions, num_drafts, active, topk=0,
                   draws=None) -> Proposal:
    """A proposer's `propose`: plan_propose then draft, in one call (for callers outside the loop,
    which runs the two apart, the draft inside its step's graph)."""
    plan, lengths = proposer.plan_propose(history, positions, num_drafts, active)
    dev = last_tokens.device
    return proposer.draft({k: torch.as_tensor(v, device=dev) for k, v in plan.items()}, last_tokens,
                          target_hidden, num_drafts, topk, draws, lengths)


@dataclass
class RowsWritten:
    """What a context/catch-up write did, for fingerprint events and tests."""
    seq: np.ndarray      # [N] sequence of each row
    key: np.ndarray      # [N] pair key
    slot: np.ndarray     # [N] drafter KV slot
    rope: np.ndarray     # [N] RoPE position
    label: np.ndarray    # [N] ring label read (-1 when not from the ring)
    hiddens: Optional[torch.Tensor]  # [N, H] the hiddens fed (None for a token-only drafter)

    @staticmethod
    def empty() -> "RowsWritten":
        z = np.zeros(0, dtype=np.int64)
        return RowsWritten(z, z, z, z, z, None)

    def __len__(self) -> int:
        return len(self.seq)


@dataclass
class RowFeed:
    """Rows to write, flat: row i is pair key key[i] = (token[i] at key+1, hidden i)."""
    seq: np.ndarray      # [N]
    key: np.ndarray      # [N]
    token: np.ndarray    # [N] token at position key+1
    label: np.ndarray    # [N] ring label the hidden came from (-1: not the ring)
    hiddens: torch.Tensor  # [N, H] target hidden of position key

    def __len__(self) -> int:
        return len(self.seq)


class DraftProposer(ABC):
    """What the loop calls on every drafter, whatever the arm (speculative/loop.py, step.py,
    lever_rows.py). A family subclasses it and, for the arms that need more, the capabilities of
    proposers/capabilities.py; `capabilities.require` checks them once, when a wave is built."""
    kind: str
    #: rows must append at slot == pair key (the dense row space): a feed that would leave a
    #: hole is skipped rather than written at the wrong RoPE position
    slot_is_key: bool
    #: plan arrays the drafter reads a depth's column at a time (the step lays them out batch-innermost)
    per_depth: tuple = ()
    #: the drafter's KV pool (set by `alloc`; None before): a step graph reads it by address
    kv = None
    #: the target layers whose residual streams (concatenated) the drafter is handed instead of the
    #: last layer's output (`runtime.model.Taps` numbering; EAGLE-3's aux hidden states); () = the last
    #: layer's, pre final norm. The target and the stored trajectory provide what this names.
    feature_layers: tuple = ()

    @abstractmethod
    def alloc(self, budgets: np.ndarray) -> None:
        """Per-sequence state for len(budgets) sequences, each sized from its budget."""

    @abstractmethod
    def free(self) -> None:
        """Release per-sequence state."""

    @abstractmethod
    def prefill_drafter(self, rows: "RowFeed") -> RowsWritten:
        """Write drafter context rows over a turn's prompt (DRAFTER_PREFILL; every arm's first turn)."""

    @abstractmethod
    def plan_propose(self, history: np.ndarray, positions: np.ndarray, num_drafts: int,
                     active: np.ndarray, static: bool = False) -> tuple[dict, dict]:
        """Host: book a propose at `positions`; returns its int64 arrays [B, ...] for `draft` and
        its KV read lengths (`full_lengths()` when `static`)."""

    @abstractmethod
    def full_lengths(self) -> dict:
        """The drafter's KV read lengths at static shapes, by name (its pool's full capacity)."""

    @abstractmethod
    def draft(self, plan: dict, last_tokens: torch.Tensor, target_hidden: torch.Tensor, num_drafts: int,
              topk: int = 0, draws: Optional[Draws] = None, lengths: Optional[dict] = None) -> Proposal:
        """Device: K drafts per active sequence, autoregressively: each its head's argmax, or
        drawn by `draws` (then the Proposal carries q)."""

    #: plan_propose then draft, in one call (for callers outside the loop)
    propose = plan_and_draft

    @abstractmethod
    def after_verify(self, num_accepted: np.ndarray, active: np.ndarray) -> None:
        """Trim state after verification."""

    def carried(self):
        """What the family carries from one wave to the next (suffix decoding: its global tree), for a
        wave run twice (replay's live check) to start from the same state; None: nothing."""
        return None

    def carry(self, state) -> None:  # noqa: B027 -- a family with nothing carried has nothing to put back
        """Put back what `carried` returned."""

    @abstractmethod
    def drafter_rows(self) -> np.ndarray:
        """Drafter KV rows per sequence (the catch-up append point)."""

    @abstractmethod
    def last_pair_key(self) -> np.ndarray:
        """Pair key of each sequence's newest drafter row (-1 = none)."""

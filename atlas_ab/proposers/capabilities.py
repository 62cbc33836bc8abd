"""A drafter's optional capabilities, declared: what some arms call beyond `base.DraftProposer`.

A family subclasses each capability it has (MTPProposer: all four; DraftModelProposer: none), and
`require` checks, once when a wave is built, that it has every one its arm needs: a missing one is
one line naming the proposer, the capability and the lever. The loop never asks a proposer what
it has while it steps.

  CatchupFeed    CATCHUP (and REFEED, RING_PREFILL, which ride on it): catch-up rows from the ring
  OracleDraft    ORACLE_P2: draft 2 again from the target's true hidden
  TreeDrafter    TREE: a static draft tree, drafted, compacted and booked as its accepted path
  DevicePlanner  none required: at static shapes a wave runs ahead of the host only with it
                 (speculative/run_ahead.py); without it the wave steps with the host's plans
  NewRequest     PREFIX_REUSE without CARRY_DRAFTER: a turn's new request starts from a fresh drafter
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.errors import AtlasError
from atlas_ab.proposers.base import DraftProposer, RowFeed, RowsWritten


class CatchupFeed(ABC):
    """CATCHUP: rows whose hiddens come from the ring, planned on the host, written in the step."""

    @abstractmethod
    def plan_rows(self, feed: RowFeed, static: bool = False,
                  width: int | None = None) -> tuple[RowsWritten, dict | None]:
        """Host: book catch-up rows (hiddens to come from the ring) and lay them out as [B, T]
        int64 arrays tok, slot, rope, label for `write_rows` (None: nothing to write; `static`: T
        padded to a graph's width; `width`: T fixed, the loop's catch-up width)."""

    @abstractmethod
    def write_rows(self, tok: torch.Tensor, hid: torch.Tensor, rope: torch.Tensor, slot: torch.Tensor,
                   length: int) -> None:
        """Device: drafter KV rows for target-hidden inputs: tok, rope, slot [B, T] (padding at slot
        -1), hid [B, T, H] the trunk's pre-norm hiddens."""


class OracleDraft(ABC):
    """ORACLE_P2: would draft 2 have hit from the target's true hidden? (observational only)"""

    @abstractmethod
    def plan_oracle(self, positions: np.ndarray, active: np.ndarray) -> tuple[dict, dict]:
        """Host: the oracle's row and RoPE position ([B] int64 each) and its KV read length."""

    @abstractmethod
    def oracle_draft2(self, draft1: torch.Tensor, true_hidden: torch.Tensor, plan: dict,
                      lengths: dict) -> torch.Tensor:
        """Device: draft 2 [B] from the target's true hidden of position n, the drafter's state untouched."""


class TreeDrafter(ABC):
    """TREE: a static tree (config/tree.py) drafted in one propose, verified in one forward."""

    @abstractmethod
    def plan_propose_tree(self, positions: np.ndarray, tree, active: np.ndarray) -> tuple[dict, dict]:
        """Host: book the tree's rows (one per internal node); its arrays and KV read length."""

    @abstractmethod
    def draft_tree(self, plan: dict, last_tokens: torch.Tensor, target_hidden: torch.Tensor, tree,
                   lengths: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Device: the tree's nodes [B, N+1] (node 0: last_tokens) and their confidences [B, N]."""

    @abstractmethod
    def compact_tree(self, path: torch.Tensor, tree, base: torch.Tensor) -> None:
        """Device: the accepted path's rows onto the slots a linear propose would have used."""

    @abstractmethod
    def after_verify_tree(self, accepted: np.ndarray, best: np.ndarray, tree, active: np.ndarray) -> None:
        """Host: book the compacted path as `after_verify` books a linear propose."""


class DevicePlanner(ABC):
    """The run-ahead: the host's propose and catch-up plans made on the device, booking nothing."""
    #: [B, rows] the pair key of each drafter row (-1: none); the run-ahead's device copy starts from it
    row_key: np.ndarray

    @abstractmethod
    def plan_on_device(self, rows: torch.Tensor, positions: torch.Tensor, active: torch.Tensor, num_drafts: int,
                       oracle: bool) -> dict:
        """Device: `plan_propose`'s arrays (and, `oracle`, `plan_oracle`'s) from the rows [B]."""

    @abstractmethod
    def feed_on_device(self, keys: torch.Tensor, live: torch.Tensor, rows: torch.Tensor, history: torch.Tensor,
                       width: int) -> tuple[dict, torch.Tensor]:
        """Device: `plan_rows` of the catch-up's live keys, [B, width]; and the rows fed [B]."""

    @abstractmethod
    def trim_table(self, num_drafts: int) -> list[int]:
        """Rows `after_verify` drops for each accepted count 0..K."""

    @abstractmethod
    def rows_on_device(self, rows: torch.Tensor, accepted: torch.Tensor, active: torch.Tensor, num_drafts: int,
                       trim: torch.Tensor) -> torch.Tensor:
        """Device: the drafter's rows [B] after a propose and its verify, as the host books them."""


class NewRequest(ABC):
    """PREFIX_REUSE: a turn served as a new request, whose drafter state is a fresh one (the engine's
    `alloc_state`) unless CARRY_DRAFTER installs the last turn's (`take_drafter_kv` / `install_drafter_kv`)."""

    @abstractmethod
    def new_request(self) -> None:
        """Host: every sequence's drafter state as a new request's: no rows, no pair keys. The KV
        pool is kept (a step graph reads it by address); its old rows are past every row's reach."""


#: (capability, the lever that needs it, whether an arm has that lever on)
NEEDED = ((CatchupFeed, "catchup", lambda arm: arm.catchup),
          (OracleDraft, "oracle_p2", lambda arm: arm.oracle_p2),
          (TreeDrafter, "tree", lambda arm: arm.tree is not None),
          (NewRequest, "prefix_reuse", lambda arm: arm.prefix_reuse and not arm.carry_drafter))


def require(proposer, arm: ArmConfig) -> None:
    """Refuse, in one line, a proposer that is no DraftProposer or lacks a capability the arm needs."""
    name = type(proposer).__name__
    if not isinstance(proposer, DraftProposer):
        raise AtlasError(f"arm {arm.name!r}: proposer {name} is not a DraftProposer (proposers/base.py)")
    for capability, lever, on in NEEDED:
        if on(arm) and not isinstance(proposer, capability):
            raise AtlasError(f"arm {arm.name!r}: {lever} needs a proposer with {capability.__name__} "
                             f"(proposers/capabilities.py); {name} (kind {proposer.kind!r}) has none")


def plans_on_device(proposer) -> bool:
    """Whether the proposer can plan a step on the device (the run-ahead's one optional capability)."""
    return isinstance(proposer, DevicePlanner)

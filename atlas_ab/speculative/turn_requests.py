"""PREFIX_REUSE's host side: a turn as the engine serves it, a new request over a prefix cache.

Under `prefix_reuse` each warm turn (t >= 1) is a new request whose target prefill starts at the
reused-prefix boundary (the target's KV is the prefix cache's, so the target's trajectory is the
one every arm follows) and whose drafter starts fresh (`NewRequest.new_request`), unless
`carry_drafter` installs the last turn's rows (the engine's `take_drafter_kv` / `install_drafter_kv`:
what a run without `prefix_reuse` always did, the turns being one request). The engine's capture
no-ops at a reused-prefix boundary, so a fresh drafter gets no rows from the prefill; DRAFTER_PREFILL
prefills it over the whole prompt, every key from 0, from the target's hiddens of the earlier
positions: `PositionHiddens` keeps them (the prefills' rows and the verified rows of every commit).
"""
from __future__ import annotations

import numpy as np
import torch

from atlas_ab.config.structured import ArmConfig


def fresh_drafter(arm: ArmConfig, turn: int) -> bool:
    """Whether turn `turn` starts from a fresh drafter: a warm turn's new request, nothing carried."""
    return arm.prefix_reuse and not arm.carry_drafter and turn > 0


def rebuilds(arm: ArmConfig) -> bool:
    """Whether the arm prefills a fresh drafter over whole prompts (it needs `PositionHiddens`)."""
    return arm.prefix_reuse and not arm.carry_drafter and arm.drafter_prefill


class PositionHiddens:
    """[B, L, H] the target's hidden of every processed position (the trunk's pre-norm stream, as
    the drafter is handed it): the turn prefills' rows and each step's committed ones."""

    def __init__(self, B: int, L: int, H: int, dtype, device):
        self.rows = torch.zeros(B, L, H, dtype=dtype, device=device)

    def put_prefill(self, hid: torch.Tensor, start: np.ndarray, count: np.ndarray) -> None:
        """hid [B, T, H]: positions start .. start+count-1 of each sequence."""
        b, j = np.nonzero(np.arange(hid.shape[1])[None, :] < count[:, None])
        self._put(b, start[b] + j, hid[self._t(b), self._t(j)])

    def put_committed(self, vh: torch.Tensor, n: np.ndarray, committed: np.ndarray, active: np.ndarray) -> None:
        """vh [B, K+1, H]: a verify's hiddens of positions n .. n+K; the first `committed` of each
        active sequence were processed (its token and the accepted drafts)."""
        c = np.where(active, committed, 0)
        b, j = np.nonzero(np.arange(vh.shape[1])[None, :] < c[:, None])
        self._put(b, n[b] + j, vh[self._t(b), self._t(j)])

    def _t(self, x) -> torch.Tensor:
        return torch.as_tensor(x, device=self.rows.device)

    def _put(self, b, pos, rows) -> None:
        if len(b):
            self.rows[self._t(b), self._t(pos)] = rows.to(self.rows.dtype)

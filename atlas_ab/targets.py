"""The target side of a wave: what the loop asks of the target model.

`Wave` (loop.py) drives the drafter's state machine; it asks its target for two
things only:

  prefill(turn, history, start, count) -> hid [B, T, H], first [B]
      the hiddens of positions start .. start+count-1 of each sequence (the turn's
      new context, from the pending token on) and the target's next token after them
  verify(vtok, pos, slots, length) -> vh [B, K+1, H], target [B, K+1]
      the hiddens and argmaxes at positions n .. n+K for inputs [t_n, d1 .. dK]

`LiveTarget` runs the trunk's forwards on its own KV.
"""
from __future__ import annotations

import numpy as np
import torch

from atlas_ab.runtime.batch import ragged_window
from atlas_ab.runtime.graphs import Steps


class LiveTarget:
    """Live mode: the trunk's own prefill and verify forwards on its KV pool."""

    live = True

    def __init__(self, trunk, graphs: bool = False):
        self.trunk = trunk
        p = next(trunk.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.hidden_size = trunk.args.hidden_size
        self.steps = Steps(graphs)    # the verify, captured once per wave on the GPU
        self.kv = None

    def alloc(self, budgets: np.ndarray) -> None:
        self.kv = self.trunk.new_kv(np.asarray(budgets).tolist())
        self.steps.clear()

    def free(self) -> None:
        self.kv = None
        self.steps.clear()

    def _t(self, x) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)

    def prefill(self, turn: int, history: np.ndarray, start: np.ndarray, count: np.ndarray):
        tok, pos, slots, length = ragged_window(history, start, count)
        hid = self.trunk.forward(self._t(tok), self._t(pos), self._t(slots), self.kv, length=length)
        last = hid[torch.arange(len(start), device=self.device), self._t(count - 1)]
        return hid, self.trunk.logits(last[:, None])[:, 0].argmax(-1)

    def _verify_fn(self, vtok, pos, slots, length):
        """Target forward over [t_n, d1..dK]: hiddens and argmaxes per depth."""
        vh = self.trunk.forward(vtok, pos, slots, self.kv, length=length)
        return vh, self.trunk.logits(vh).argmax(-1)

    def verify(self, vtok, pos, slots, length: int):
        return self.steps("verify", self._verify_fn, [vtok, pos, slots], length, self.kv.max_capacity)

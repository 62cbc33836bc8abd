"""The EAGLE-3 drafter: an `Eagle3Head` (runtime/eagle3.py) run autoregressively over its own KV rows.

It is the MTP head's state machine (the same rows, row spaces, catch-up feed and trims:
`MTPProposer`) with another head and another handoff: the target hands it the residual streams
of several of its layers (`feature_layers`, concatenated: vLLM's aux hidden states), which
`_handoff` fuses through the head's fc (vLLM's `combine_hidden_states`) wherever a target hidden
enters (draft 1, context and catch-up rows); drafts 2+ read the head's own pre-norm output
unchanged (`_recycle`), as vLLM's EAGLE-3 proposer feeds it back. HANDOFF_NORM / RECYCLE_NORM,
ORACLE_P2 and TREE are the MTP head's and are refused for it (config/structured.py).
"""
from __future__ import annotations

import torch

from atlas_ab.proposers.base import DraftChain, Proposal, drawn
from atlas_ab.proposers.mtp_head import MTPProposer


class EAGLE3Proposer(MTPProposer):
    kind = "eagle3"

    def __init__(self, trunk, head, row_space: str, refeed: bool):
        # self.mtp is the head, self.head its draft head; its context rows run the whole layer, as vLLM's
        # EAGLE-3 proposer runs them (the MTP head's KV-only shortcut is the GLM engine's, and MTPModule's)
        super().__init__(trunk, head, row_space, refeed, prefill_full=True)
        #: the target layers whose residual streams it is handed (the target reads this: speculative/targets.py)
        self.feature_layers = head.layers

    def _handoff(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """Target features [..., n*H] as the head reads them: fused by its fc."""
        return self.mtp.combine(target_hidden)

    def _recycle(self, out: torch.Tensor) -> torch.Tensor:
        return out          # the head's pre-norm output, as vLLM's aux_output (norm_output off)

    def draft(self, plan: dict, last_tokens, target_hidden, num_drafts: int, topk: int = 0, draws=None,
              lengths: dict | None = None) -> Proposal:
        """Device: K drafts per sequence; draft 1 from the target's fused features, the later ones
        from the head's own output (`MTPProposer.draft` with the handoff at depth 0 always)."""
        tok, hid = last_tokens, target_hidden
        chain = DraftChain(topk)
        sampled = draws is not None
        for i in range(num_drafts):
            out, conf, draft, ids, p, *z = self._draft_step(tok, hid, plan["d_rope"][:, i], plan["d_slot"][:, i],
                                                            lengths["draft"], topk, i == 0, sampled)
            draft, q = drawn(draws, i, z[0] if z else None, draft)
            chain.add(draft, conf, ids, p, q)
            tok, hid = draft, out
        return chain.proposal()

"""Prompt lookup (vLLM's `ngram` method): drafts copied from the context after the suffix's longest earlier match.

No weights and no device work: each row's drafts are found on the host (proposers/host_drafts.py);
a row gets between 0 and K of them, and with none its step is a plain decode for that row (k = 0).

The rule is vLLM 0.32's, `vllm/v1/spec_decode/ngram_proposer.py`,
`_find_longest_matched_ngram_and_propose_tokens` (a KMP over the reversed context), restated:
  - context: the committed tokens, the newest included (vLLM's `token_ids_cpu[:num_tokens_no_spec]`);
    fewer than prompt_lookup_min tokens: no drafts
  - n: the largest length in [prompt_lookup_min, prompt_lookup_max] whose context suffix also occurs
    earlier, ending before the context's last token
  - of the occurrences of that n-gram, the EARLIEST in the context (the KMP keeps the last match
    in reversed order, `prev_lps >= longest_ngram`)
  - drafts: the up-to-K tokens that follow it (fewer where the context ends first; never past it)
vLLM's defaults (`vllm/config/speculative.py`): both bounds unset: 5 and 5; one set: the other
equals it. Its max_model_len cut is left out: a wave's budget holds every drafted position.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from atlas_ab.proposers.host_drafts import HostDraftProposer


def ngram_drafts(context: np.ndarray, lo: int, hi: int, k: int) -> np.ndarray:
    """The drafts vLLM's ngram proposer makes of `context` (1-D token ids): the up-to-k tokens
    after the earliest earlier occurrence of the longest suffix n-gram, lo <= n <= hi; [] if none."""
    total = len(context)
    if total < lo:
        return context[:0]
    for n in range(min(hi, total - 1), lo - 1, -1):
        # occurrences starting at a, a + n <= total - 1: the n-gram ends before the last token
        hit = (sliding_window_view(context[:total - 1], n) == context[total - n:]).all(axis=1)
        if hit.any():
            start = int(np.argmax(hit)) + n            # the earliest occurrence
            return context[start:start + min(k, total - start)]
    return context[:0]


class NgramProposer(HostDraftProposer):
    """Prompt lookup over each row's own context; nothing kept between proposes."""
    kind = "ngram"

    def __init__(self, lookup_min: int, lookup_max: int):
        self.lo, self.hi = lookup_min, lookup_max

    def row_drafts(self, b: int, context: np.ndarray, num_drafts: int) -> np.ndarray:
        return ngram_drafts(context, self.lo, self.hi, num_drafts)

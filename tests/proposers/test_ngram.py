"""Prompt lookup, literally: vLLM's ngram rule on hand-built contexts (longest n-gram first, then its
earliest occurrence; the drafts cut at the context's end), and its bounds as vLLM resolves them.
(Checked once against vLLM 0.32's own `_find_longest_matched_ngram_and_propose_tokens` on 20,000
random contexts: identical; the vLLM venv is not a test dependency.)"""
import numpy as np
import pytest
import torch

from atlas_ab.config.engine_specs import lookup_bounds
from atlas_ab.proposers.base import plan_and_draft
from atlas_ab.proposers.host_drafts import PAD
from atlas_ab.proposers.ngram import NgramProposer, ngram_drafts


def drafts(ctx, lo, hi, k):
    return ngram_drafts(np.array(ctx, dtype=np.int64), lo, hi, k).tolist()


def test_the_longest_suffix_ngram_wins_over_an_earlier_shorter_one():
    # [2, 3] occurs at 1; the 3-gram [1, 2, 3] only at 4: the 3-gram's continuation
    assert drafts([7, 2, 3, 0, 1, 2, 3, 4, 9, 1, 2, 3], 1, 3, 2) == [4, 9]
    # capped at prompt_lookup_max = 2: the 2-gram [2, 3]'s earliest occurrence, at 1
    assert drafts([7, 2, 3, 0, 1, 2, 3, 4, 9, 1, 2, 3], 1, 2, 2) == [0, 1]


def test_of_equal_matches_the_earliest_in_the_context():
    # [1, 2] at 1 and at 4 (and the suffix itself, at 7, which is not a match)
    assert drafts([5, 1, 2, 9, 1, 2, 8, 1, 2], 2, 2, 2) == [9, 1]


def test_the_drafts_stop_at_the_context_end():
    assert drafts([1, 2, 3, 4, 1, 2, 3], 1, 3, 3) == [4, 1, 2]
    assert drafts([1, 2, 1, 2], 2, 2, 3) == [1, 2]       # only two tokens follow the match
    assert drafts([7, 7, 7, 7], 1, 3, 4) == [7]           # [7, 7, 7] at 0, one token after it


def test_no_match_and_short_contexts_give_no_drafts():
    assert drafts([1, 2, 3, 4], 2, 2, 3) == []            # [3, 4] occurs nowhere earlier
    assert drafts([1, 2, 3, 4, 9, 3], 2, 3, 3) == []      # [9, 3] / [4, 9, 3] neither; 1-grams are below min
    assert drafts([1], 2, 3, 3) == []                     # shorter than prompt_lookup_min
    assert drafts([], 1, 1, 3) == []


def test_bounds_resolve_as_vllm_does():
    assert lookup_bounds(None, None) == (5, 5)
    assert lookup_bounds(2, None) == (2, 2)
    assert lookup_bounds(None, 4) == (4, 4)
    assert lookup_bounds(1, 3) == (1, 3)


def test_the_plan_carries_each_rows_drafts_and_count():
    history = np.array([[1, 2, 3, 1, 2, 0, 0],       # n = 4: [1, 2] at 0 -> [3, 1, 2]
                        [4, 5, 6, 7, 0, 0, 0],       # n = 3: no match
                        [8, 8, 8, 8, 8, 0, 0]])      # inactive
    p = NgramProposer(1, 2)
    p.alloc(np.full(3, 16))
    prop = plan_and_draft(p, history, torch.tensor([2, 7, 8]), None, np.array([4, 3, 4]), 3,
                          np.array([True, True, False]))
    assert prop.drafts.tolist() == [[3, 1, 2], [PAD] * 3, [PAD] * 3]
    assert prop.n_valid.tolist() == [3, 0, 0]
    assert prop.conf.tolist() == [[1.0, 1.0, 1.0], [0.0] * 3, [0.0] * 3]
    assert p.drafter_rows().tolist() == [0, 0, 0] and p.last_pair_key().tolist() == [-1, -1, -1]


@pytest.mark.parametrize("k, want", [(1, [3]), (2, [3, 1]), (5, [3, 1, 2])])
def test_k_caps_the_drafts(k, want):
    assert drafts([1, 2, 3, 1, 2], 1, 2, k) == want

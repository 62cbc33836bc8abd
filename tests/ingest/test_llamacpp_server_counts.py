"""ingest/llamacpp.server_counts: one turn of our steps counted as llama.cpp's server counts its own
(hand-computed; scripts/llamacpp_compare.py and bench/bench_peer.py both count through it)."""
from atlas_ab.ingest.llamacpp import server_counts


def test_a_turn_far_from_its_end_counts_as_recorded():
    # G = 32, 1 token before the first step: each drafts min(2, 32 - g - 1) = 2
    assert server_counts([(2, 1, 2), (2, 2, 3), (2, 0, 1)], 32) == (3, 6, 3)


def test_the_last_tokens_draft_less_and_the_last_one_nothing():
    # G = 8: g = 1 -> drafts min(2, 6) = 2, accepts 2, commits 3; g = 4 -> 2, accepts 2, commits 3;
    # g = 7 -> min(2, 0) = 0: an undrafted step, its accepted draft not counted
    assert server_counts([(2, 2, 3), (2, 2, 3), (2, 1, 1)], 8) == (2, 4, 4)
    # g = 5 of G = 7: drafts 1 though the row drafted 3, accepts min(3, 1) = 1
    assert server_counts([(3, 3, 4), (3, 3, 2)], 7) == (2, 4, 4)


def test_an_empty_turn_counts_nothing():
    assert server_counts([], 32) == (0, 0, 0)

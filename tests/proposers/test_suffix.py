"""Suffix decoding, literally: the tree's counts and candidates on hand-built sequences (worked by
hand from Arctic Inference's rules: proposers/suffix_tree.py), the cache's local / global choice and
its FIFO eviction, and the proposer across a turn boundary."""
import numpy as np
import pytest

from atlas_ab.proposers.suffix import SuffixCache, SuffixProposer
from atlas_ab.proposers.suffix_tree import SuffixTree


def tree(*seqs, depth=24):
    t = SuffixTree(depth)
    for i, s in enumerate(seqs):
        t.extend(i, s)
    return t


def test_counts_are_occurrences():
    t = tree([1, 2, 3, 1, 2, 4])
    assert t.root_count == 6
    assert t.counts([]) == {1: 2, 2: 2, 3: 1, 4: 1}
    assert t.counts([1]) == {2: 2}
    assert t.counts([1, 2]) == {3: 1, 4: 1}
    assert t.counts([2, 3]) == {1: 1} and t.counts([2, 4]) == {}


def test_depth_caps_the_substrings():
    t = tree([1, 2, 3], depth=2)
    assert t.counts([1]) == {2: 1} and t.counts([1, 2]) == {} and t.node_of([1, 2, 3]) is None


def test_remove_uncounts_a_sequence():
    t = tree([1, 2, 3], [1, 2, 4])
    assert t.counts([1, 2]) == {3: 1, 4: 1}
    t.remove(0)
    assert t.root_count == 3 and t.counts([1, 2]) == {4: 1} and t.counts([]) == {1: 1, 2: 1, 4: 1}


def test_the_path_takes_the_most_frequent_child_until_prob_or_length_stops_it():
    t = tree([1, 2, 3, 1, 2, 4])
    d = t.speculate([9, 1], 3, 1.0, 0.1)            # match [1] only: at most 1 x 1 drafts
    assert (d.token_ids, d.match_len, float(d.score)) == ([2], 1, 1.0)
    d = t.speculate([9, 1], 3, 3.0, 0.1)            # 2 (p 1), then 3 (tie 3 / 4: the first added; p 1/2), then 1
    assert (d.token_ids, [float(p) for p in d.probs], float(d.score)) == ([2, 3, 1], [1.0, 0.5, 0.5], 2.0)
    d = t.speculate([9, 1], 3, 3.0, 0.6)            # p 1/2 is below 0.6: it stops after one
    assert d.token_ids == [2]


def test_the_best_score_wins_and_a_longer_match_on_a_tie():
    t = tree([1, 2, 3, 1, 2, 4])
    # match [2] (cap 1): [3] at 0.5; match [1, 2] (cap 2): [3, 1] at 0.5 + 0.5 = 1.0
    d = t.speculate([3, 1, 2], 3, 1.0, 0.1)
    assert (d.token_ids, d.match_len, float(d.score)) == ([3, 1], 2, 1.0)
    # the full pattern is never matched: [9, 2] gives match 1 only
    assert t.speculate([9, 2], 3, 1.0, 0.1).match_len == 1


def test_the_global_tree_wins_only_with_a_greater_score():
    c = SuffixCache(24, 10)
    c.start("a", [1, 2])
    c.add("a", [3, 4, 5])
    c.start("b", [7])
    c.add("b", [3, 4])
    d = c.speculate("b", [7, 3, 4], 3, 1.0, 0.1)    # b's own tree has nothing after [4]; the responses do
    assert (d.token_ids, d.match_len, float(d.score)) == ([5], 2, 0.5)


def test_the_global_tree_evicts_first_in_first_out():
    c = SuffixCache(24, 1)
    c.start("a", [1, 2])
    c.add("a", [3, 4, 5])
    c.start("b", [7])                                 # a's response leaves the global tree
    c.add("b", [3, 4])
    assert c.speculate("b", [7, 3, 4], 3, 1.0, 0.1).token_ids == []
    assert list(c.cached) == ["b"] and "a" not in c.global_tree.seqs


def test_no_global_tree_at_zero_cached_requests():
    c = SuffixCache(24, 0)
    c.start("a", [1])
    c.add("a", [2, 3])
    assert c.global_tree.root_count == 0 and c.local["a"].root_count == 3


def test_a_new_turn_is_a_new_request_and_the_last_one_is_in_the_global_tree():
    p = SuffixProposer(24, 1.0, 0.1, 10)
    p.alloc(np.array([32]))
    h = np.zeros((1, 32), dtype=np.int64)
    h[0, :4] = [5, 6, 7, 8]                            # prompt [5, 6, 7], first token 8 at 3
    plan, _ = p.plan_propose(h, np.array([3]), 3, np.array([True]))
    assert plan["lk_valid"].tolist() == [0]            # nothing follows 8 yet
    p.after_verify(np.array([0]), np.array([True]))    # committed: the target's 9 at 4
    h[0, 4] = 9
    h[0, 5:9] = [5, 6, 7, 8]                           # turn 1: chunk [5, 6, 7], first token 8 at 8
    plan, _ = p.plan_propose(h, np.array([8]), 3, np.array([True]))
    # local tree [5 6 7 8 9 5 6 7 8]: match [5, 6, 7, 8] (count 2) -> 9, 5, 6 at prob 1/2 each, score 1.5
    assert plan["lk_drafts"].tolist() == [[9, 5, 6]] and plan["lk_valid"].tolist() == [3]
    assert p.cache.global_tree.seqs == {0: [8, 9], 1: [8]}    # request 0's whole response, request 1's so far
    p.free()
    assert p.cache.local == {}


@pytest.mark.parametrize("depth", [1, 2])
def test_a_shallow_tree_drafts_nothing_past_its_depth(depth):
    t = tree([1, 2, 3, 1, 2, 3], depth=depth)
    assert len(t.speculate([5, 1], 4, 4.0, 0.0).token_ids) == depth - 1


def test_counts_equal_a_brute_force_count_through_appends_and_removals():
    """The trie's node ids are reused after a removal: every count must still be the substring's occurrences
    over the sequences held (each of length <= max_depth), and removing every sequence frees every node."""
    import random
    rng = random.Random(0)
    for depth in (1, 2, 3, 5):
        t, held = SuffixTree(depth), {}
        for _ in range(120):
            if held and rng.random() < 0.25:
                s = rng.choice(sorted(held))
                t.remove(s)
                del held[s]
            else:
                s, toks = rng.randrange(5), [rng.randrange(3) for _ in range(rng.randrange(1, 8))]
                t.extend(s, toks)
                held.setdefault(s, []).extend(toks)
            pat = [rng.randrange(3) for _ in range(rng.randrange(0, depth))]
            want = {}
            for seq in held.values():
                for i in range(len(seq) - len(pat)):
                    if seq[i:i + len(pat)] == pat:
                        want[seq[i + len(pat)]] = want.get(seq[i + len(pat)], 0) + 1
            assert t.counts(pat) == want
            assert t.root_count == sum(map(len, held.values()))
        for s in sorted(held):
            t.remove(s)
        assert t.root_count == 0 and len(t.free) == len(t.count) - 1


def test_ties_go_to_the_head_of_arctics_sibling_order_not_the_child_added_first():
    """After 9: 1 once, then 2 and 3 twice each, 3 raised to 2 before 2 was. Arctic Inference 0.3.0 (what vLLM 0.32's
    suffix method runs) keeps 9's children sorted by count with 3 ahead of 2, and drafts 3 at 2 / 5 = 0.4 (its
    native tree, checked on 2026-12-04); the child added first would have been 2."""
    t = SuffixTree(24)
    t.extend(0, [9, 1, 9, 2, 9, 3, 9, 3, 9, 2])
    d = t.speculate([0, 9], 1, 1.0, 0.1)
    assert t.counts([9]) == {1: 1, 2: 2, 3: 2}
    assert d.token_ids == [3] and d.score == np.float32(0.4)
    t.extend(0, [9, 1, 9, 1])          # 1 climbs past both to 3
    assert t.speculate([0, 9], 1, 1.0, 0.1).token_ids == [1]

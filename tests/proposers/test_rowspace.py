"""Both row spaces keep the drafter's row count and pair keys as specified,
after every accept pattern (exhaustive for K <= 3 over three verifies)."""
import itertools

import numpy as np
import pytest
import torch

from atlas_ab.proposers.base import RowFeed
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.proposers.rowspace import rows_to_trim
from tests.helpers.tiny import tiny_models

# Not float_sensitive: rows and keys are host bookkeeping of the accept pattern; no test here reads
# a drafted value, so scripts/test.sh's two-thread rerun has nothing to check in this file.


def test_seed_examples_of_the_compact_trim():
    # The reference engine's comment: "K=2: drafted 1, accepted 0 -> trim 1. accepted 1 -> trim 0.
    # K=3: drafted 2, accepted 0 -> trim 2. accepted 1 -> trim 1. accepted 2 -> trim 0."
    assert [rows_to_trim("compact", 1, a, False) for a in (0, 1)] == [1, 0]
    assert [rows_to_trim("compact", 2, a, False) for a in (0, 1, 2)] == [2, 1, 0]


def test_dense_never_trims_row_zero_at_one_draft():
    assert [rows_to_trim("dense", 1, a, False) for a in (0, 1)] == [0, 0]


@pytest.fixture(scope="module")
def models():
    return tiny_models()


def _prefilled(models, row_space, refeed, P=6):
    trunk, mtp = models
    prop = MTPProposer(trunk, mtp, row_space, refeed)
    prop.alloc(np.array([64]))
    H = trunk.args.hidden_size
    keys = np.arange(P - 1)
    prop.prefill_drafter(RowFeed(seq=np.zeros(P - 1, dtype=np.int64), key=keys, token=keys + 1,
                                 label=np.full(P - 1, -1), hiddens=torch.randn(P - 1, H)))
    return prop


@pytest.mark.parametrize("row_space", ["compact", "dense"])
@pytest.mark.parametrize("refeed", [False, True])
@pytest.mark.parametrize("K", [1, 2, pytest.param(3, marks=pytest.mark.slow)])   # K=3's 64 patterns: whole suite
def test_rows_and_keys_after_every_accept_pattern(models, row_space, refeed, K):
    H = models[0].args.hidden_size
    active = np.array([True])
    for pattern in itertools.product(range(K + 1), repeat=3):
        prop = _prefilled(models, row_space, refeed)
        n = 6                                    # position of the last committed token
        for a in pattern:
            rows0 = int(prop.rows[0])
            keys0 = prop.row_key[0, :rows0].copy()
            prop.propose(None, torch.tensor([3]), torch.randn(1, H), np.array([n]), K, active)
            assert prop.rows[0] == rows0 + K
            assert list(prop.row_key[0, rows0:rows0 + K]) == list(range(n - 1, n - 1 + K))
            prop.after_verify(np.array([a]), active)
            rows = int(prop.rows[0])
            kept = prop.row_key[0, rows0:rows]
            target = prop.row_target[0, rows0:rows]
            assert list(prop.row_key[0, :rows0]) == list(keys0), "rows before the propose are never touched"
            if row_space == "compact":
                # rows exist only for what was accepted; REFEED keeps only row 0
                want = min(a, 1) if refeed else a
                assert rows == rows0 + want
                assert list(kept) == list(range(n - 1, n - 1 + want))
            else:
                # row 0 always stays; REFEED drops every row that holds a drafter hidden
                want = 1 if refeed else min(K, a + 1)
                assert rows == rows0 + want
                assert list(kept) == list(range(n - 1, n - 1 + want))
            assert target[:1].all() and not target[1:].any(), "row 0 holds the target hidden, later rows the drafter's"
            expect_last = kept[-1] if len(kept) else (keys0[-1] if len(keys0) else -1)
            assert prop.last_pair_key()[0] == expect_last
            assert (prop.row_key[0, rows:] == -1).all(), "trimmed rows are forgotten"
            n += a + 1

"""Metric definitions (docs/telemetry.md) on hand-built tables, plus properties."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from atlas_ab import AtlasError
from atlas_ab.analysis.metrics import arm_metrics, cell_counts, doc_sums, histogram, rates, require_depth
from atlas_ab.telemetry.acceptance import parse_metric


def table(rows):
    """rows: (doc_id, turn, k, accept_len); steps numbered per (doc, turn)."""
    df = pd.DataFrame(rows, columns=["doc_id", "turn", "k", "accept_len"])
    df["step"] = df.groupby(["doc_id", "turn"]).cumcount()
    return df


# 10 steps, K = 3. Two serial steps (k = 0), one gated-down step with k = 1.
TINY = table([
    (0, 0, 3, 3), (0, 0, 3, 0), (0, 0, 0, 0), (0, 1, 3, 1), (0, 1, 1, 1),
    (1, 0, 3, 2), (1, 0, 2, 2), (1, 1, 2, 1), (1, 1, 0, 0), (1, 1, 3, 3),
])


def test_tiny_table_by_hand():
    r = rates(cell_counts(TINY, "x"))
    assert (r["n_steps"], r["n_serial"], r["n_verify"]) == (10, 2, 8)
    # p1: k >= 1 on 8 steps; accept_len >= 1 on all but (0,0,3,0): 7/8
    assert r["p1"] == 7 / 8 and r["n_p1"] == 8
    # p2: k >= 2 on 7 steps (the k=1 step is not a rejection at depth 2);
    # accept_len >= 2 on (3,3), (3,2), (2,2), (3,3): 4/7
    assert r["p2_uncond"] == 4 / 7 and r["n_p2_uncond"] == 7
    # p3: k >= 3 on 5 steps; accept_len >= 3 on two: 2/5
    assert r["p3"] == 2 / 5 and r["n_p3"] == 5
    # p2_cond: accept_len >= 1 and k >= 2: 6 steps, of which 4 reach depth 2
    assert r["p2_cond"] == 4 / 6 and r["n_p2_cond"] == 6
    # p3_cond: accept_len >= 2 and k >= 3: (3,3), (3,2), (3,3) -> 2/3 ((2,2) has k < 3)
    assert r["p3_cond"] == 2 / 3 and r["n_p3_cond"] == 3
    # tokens/step: mean of 1 + accept_len over the 8 verify steps: (4+1+2+2+3+3+2+4)/8
    assert r["tokens_per_step"] == 21 / 8


def test_histogram_and_turn_classes():
    cells = cell_counts(TINY, "x")
    h = histogram(cells)
    assert list(h.columns) == [0, 1, 2, 3]
    assert h.loc[3].tolist() == [1, 1, 1, 2]
    assert h.loc[2].tolist() == [0, 1, 1, 0]
    assert h.loc[1].tolist() == [0, 1, 0, 0]
    assert 0 not in h.index  # serial steps are not in any rate or histogram
    m = arm_metrics(cells)
    assert m.K == 3
    cold, warm = m.by_class.loc["cold"], m.by_class.loc["warm"]
    assert cold["n_verify"] == 4 and cold["p1"] == 3 / 4 and cold["p2_uncond"] == 3 / 4
    assert warm["n_verify"] == 4 and warm["p1"] == 1.0 and warm["p2_uncond"] == 1 / 3
    assert m.by_turn.loc[1, "n_serial"] == 1
    assert m.histogram.loc[("warm", 3)].tolist() == [0, 1, 0, 1]
    assert "p2_uncond" in m.summary()


def test_doc_sums_per_document():
    s = doc_sums(cell_counts(TINY, "x"), "p2_uncond")
    assert s.doc_id.tolist() == [0, 1]
    assert s.y.tolist() == [1, 3] and s.n.tolist() == [3, 4]
    # binomial sd for a 0/1 metric
    assert s.iid_se == pytest.approx(np.sqrt(4 / 7 * 3 / 7 / 7))


def test_metric_names():
    assert parse_metric("p2_uncond") == ("p", 2) == parse_metric("p2")
    assert parse_metric("p1_cond") == ("p", 1)
    assert parse_metric("p3_cond") == ("cond", 3)
    assert parse_metric("tokens_per_step") == ("tokens", 1)
    with pytest.raises(AtlasError):
        parse_metric("p0")
    with pytest.raises(AtlasError, match="never observed"):
        require_depth(cell_counts(TINY, "x"), "p4", "somewhere")


steps_strategy = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 4)),
                          min_size=1, max_size=60)


@settings(max_examples=40, deadline=None)
@given(rows=steps_strategy, K=st.integers(2, 4))
def test_cond_chain_property(rows, K):
    """When every step has k >= i, p_i_cond * p_{i-1} == p_i (the chain rule of the definitions)."""
    df = table([(d, t, K, min(a, K)) for d, t, a in rows])
    r = rates(cell_counts(df, "h"))
    for i in range(2, K + 1):
        prev = r["p1"] if i == 2 else (r["p2_uncond"] if i == 3 else r[f"p{i - 1}"])
        cur = r["p2_uncond"] if i == 2 else r[f"p{i}"]
        if r[f"n_p{i}_cond"]:
            assert r[f"p{i}_cond"] * prev == pytest.approx(cur)
        else:
            assert cur == 0


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 3), st.integers(0, 3)),
                     min_size=1, max_size=60))
def test_denominators_and_tokens_property(rows):
    """Denominators count exactly the steps that observed the depth; tokens = 1 + sum of p_i
    when every verify step has the same k (E[accept_len] = sum_i P(accept_len >= i))."""
    df = table([(d, t, k, min(a, k)) for d, t, k, a in rows])
    r = rates(cell_counts(df, "h"))
    K = int(df["k"].max())
    for i in range(1, K + 1):
        name = "p2_uncond" if i == 2 else f"p{i}"
        assert r[f"n_{name}"] == int((df["k"] >= i).sum())
        if r[f"n_{name}"]:
            assert r[name] == (df["accept_len"] >= i).sum() / (df["k"] >= i).sum()
    verify = df[df["k"] >= 1]
    if len(verify):
        assert r["tokens_per_step"] == pytest.approx((1 + verify["accept_len"]).mean())

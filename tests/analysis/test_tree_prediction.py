"""`coverage RUN --tree SPEC`: a static tree's acceptance predicted from the conditional top-k
coverage (analysis/tree/prediction.py), checked on a literal table by hand."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.__main__ import main as cli_main
from atlas_ab.analysis.tree import predict_tree, rank_table, topk_coverage
from atlas_ab.config.tree import linear, parse_tree
from tests.helpers.synth import write_run


def literal_steps() -> pd.DataFrame:
    """K=2, top-2, 10 steps. Depth 1: the target is the top-1 on 6, the top-2 on 2, absent on 2.
    Depth 2, over the 6 whose draft 1 was accepted: top-1 on 3, top-2 on 1, absent on 2.
    So q1 = (0.6, 0.2), q2 = (0.5, 1/6)."""
    c1, c2 = [10, 11], [20, 21]
    rows = []
    for d1, d2 in ([(0, 0)] * 3 + [(0, 1)] + [(0, None)] * 2 + [(1, 0)] * 2 + [(None, 0)] * 2):
        t1 = c1[d1] if d1 is not None else 99
        t2 = c2[d2] if d2 is not None else 98
        acc = 0 if t1 != c1[0] else (2 if t2 == c2[0] else 1)
        rows.append(dict(k=2, accept_len=acc, drafts=[c1[0], c2[0]], target=[t1, t2, 7], topk_ids=[c1, c2]))
    df = pd.DataFrame(rows).assign(doc_id=0, turn=1, step=range(len(rows)))
    return df.astype({"doc_id": "int64", "turn": "int32", "step": "int64", "k": "int32", "accept_len": "int32"})


@pytest.fixture
def cov():
    return topk_coverage(literal_steps(), "shadow")


def test_rank_tables(cov):
    q1, n1 = rank_table(cov, 1)
    q2, n2 = rank_table(cov, 2)
    assert (n1, n2) == (10, 6)
    assert q1.tolist() == pytest.approx([0.6, 0.2], abs=1e-12)
    assert q2.tolist() == pytest.approx([0.5, 1 / 6], abs=1e-12)


def test_linear_chain_is_the_product_of_p_cond(cov):
    p = predict_tree(cov, linear(2))
    assert [d.p for d in p.depths] == pytest.approx([0.6, 0.3], abs=1e-12)
    assert [d.p_cond for d in p.depths] == pytest.approx([0.6, 0.5], abs=1e-12)
    assert p.tokens_per_step == pytest.approx(1.9, abs=1e-12) and p.diff == 0.0 and p.diff_se == 0.0
    # delta method by hand: var(q1) = .6*.4/10, var(q2) = .5*.5/6; p2 = q1 q2
    assert p.depths[0].se == pytest.approx(math.sqrt(0.024), abs=1e-12)
    assert p.depths[1].se == pytest.approx(math.sqrt(0.25 * 0.024 + 0.36 * 0.25 / 6), abs=1e-12)


def test_top2_at_depth1(cov):
    p = predict_tree(cov, parse_tree("[(0,), (1,), (0, 0), (1, 0)]"), linear_k=2)
    # p1 = q1(0) + q1(1); p2 = q1(0) q2(0) + q1(1) q2(0)   (the second term: the assumption)
    assert [d.p for d in p.depths] == pytest.approx([0.8, 0.4], abs=1e-12)
    assert p.tokens_per_step == pytest.approx(2.2, abs=1e-12)
    assert (p.linear, p.linear_tokens) == ("linear K=2", pytest.approx(1.9, abs=1e-12))
    assert p.diff == pytest.approx(0.3, abs=1e-12)
    # p1 is c1@2, a binomial proportion: its delta sd is the binomial sd exactly
    assert p.depths[0].se == pytest.approx(math.sqrt(0.8 * 0.2 / 10), abs=1e-12)
    # the difference: (q1(1) + q1(1) q2(0)) - 0 = q1(1) (1 + q2(0)); gradient (0, 1.5) on q1, (0.2, 0) on q2
    var = 1.5 ** 2 * 0.2 * 0.8 / 10 + 0.2 ** 2 * 0.5 * 0.5 / 6
    assert p.diff_se == pytest.approx(math.sqrt(var), abs=1e-12)
    full = predict_tree(cov, parse_tree("topk:2,2"))
    assert full.depths[1].p == pytest.approx(0.8 * (0.5 + 1 / 6), abs=1e-12)


def test_refusals(cov):
    with pytest.raises(AtlasError, match=r"depth 3 is past the run's K=2"):
        predict_tree(cov, linear(3))
    with pytest.raises(AtlasError, match=r"rank 2 is past the run's SHADOW_TOPK=2"):
        predict_tree(cov, parse_tree("[(0,), (1,), (2,)]"))


def test_cli_tree(tmp_path, capsys):
    write_run(tmp_path / "run", literal_steps(), arm="shadow")
    assert cli_main(["coverage", str(tmp_path / "run"), "--tree", "topk:2,1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tree"]["tokens_per_step"] == pytest.approx(2.2, abs=1e-12)
    assert doc["tree"]["diff"] == pytest.approx(0.3, abs=1e-12)
    assert cli_main(["coverage", str(tmp_path / "run"), "--tree", "topk:2,1"]) == 0
    assert "tokens per verify step: 2.2000" in capsys.readouterr().out
    assert cli_main(["coverage", str(tmp_path / "run"), "--tree", "[(0,), (1, 0)]"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "tree path (1, 0): its parent (1,) is missing" in err

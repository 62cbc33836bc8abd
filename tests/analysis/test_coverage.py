"""Per-depth conditional top-k coverage (SHADOW_TOPK)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.__main__ import main as cli_main
from atlas_ab.analysis.metrics import cell_counts, rates
from atlas_ab.analysis.tree import topk_coverage
from tests.helpers.synth import write_run


def simulate_topk_steps(n: int = 600, K: int = 3, topk: int = 4, vocab: int = 40, seed: int = 0,
                        greedy: bool = True) -> pd.DataFrame:
    """Steps of a drafter whose draft is its top-1 (greedy) and whose candidates
    hold the target at a random rank, or not at all. accept_len follows from
    drafts vs targets, as verification does; some steps are serial (k = 0)."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n):
        k = int(rng.choice([0, K - 1, K, K], p=[0.1, 0.2, 0.35, 0.35]))
        topk_ids, target, drafts = [], [], []
        for _ in range(k):
            cands = rng.choice(vocab, size=topk, replace=False)
            rank = int(rng.choice(topk + 1, p=[0.55, 0.15, 0.1, 0.05, 0.15]))  # topk = absent
            tgt = int(cands[rank]) if rank < topk else int(rng.choice(np.setdiff1d(np.arange(vocab), cands)))
            topk_ids.append(cands.tolist())
            target.append(tgt)
            drafts.append(int(cands[0]) if greedy else int(cands[1]))
        accept = 0
        while accept < k and drafts[accept] == target[accept]:
            accept += 1
        target.append(int(rng.integers(vocab)))  # the bonus
        rows.append(dict(doc_id=s // 40, turn=(s // 10) % 4, step=s % 10, k=k, accept_len=accept,
                         drafts=drafts, target=target, topk_ids=topk_ids if k else None))
    df = pd.DataFrame(rows)
    return df.astype({"doc_id": "int64", "turn": "int32", "step": "int64", "k": "int32", "accept_len": "int32"})


def test_top1_coverage_equals_p_cond_for_greedy_drafts():
    steps = simulate_topk_steps()
    cov = topk_coverage(steps, "arm")
    assert (cov.K, cov.topk) == (3, 4)
    cells = cell_counts(steps, "arm")
    for turns in ("all", "cold", "warm"):
        want = rates(cells.where(turns))  # the docs' p{i}_cond, computed independently
        for i in range(1, 4):
            name = "p1" if i == 1 else f"p{i}_cond"
            top1 = cov.at(i, 1, turns)
            assert top1.n == want[f"n_{name}"]
            assert top1.rate == pytest.approx(want[name], abs=1e-12)
            assert cov.p_cond_at(i, turns) == pytest.approx(want[name], abs=1e-12)
    assert cov.top1_not_draft == 0 and cov.n_checked_top1 > 0
    assert "top-1 == draft on all" in cov.summary()


def test_coverage_counts_by_hand():
    # K=2, top-3. Depth 2 only counts steps whose draft 1 was accepted.
    steps = pd.DataFrame([
        # accept 2: depth-2 target is the top-1
        dict(k=2, accept_len=2, target=[5, 6, 9], topk_ids=[[5, 1, 2], [6, 3, 4]]),
        # accept 1: depth-2 target is the 3rd candidate
        dict(k=2, accept_len=1, target=[5, 7, 9], topk_ids=[[5, 1, 2], [6, 3, 7]]),
        # accept 0: depth-1 target is the 2nd candidate; depth 2 not in its denominator
        dict(k=2, accept_len=0, target=[1, 7, 9], topk_ids=[[5, 1, 2], [7, 3, 4]]),
        # k=1: depth 2 not observed; depth-1 target absent from the candidates
        dict(k=1, accept_len=0, target=[8, 9], topk_ids=[[5, 1, 2]]),
        # a serial step counts nowhere
        dict(k=0, accept_len=0, target=[3], topk_ids=None),
    ]).assign(doc_id=0, turn=0, step=range(5))
    cov = topk_coverage(steps)
    assert [(c.hits, c.n) for c in (cov.at(1, j) for j in (1, 2, 3))] == [(2, 4), (3, 4), (3, 4)]
    assert [(c.hits, c.n) for c in (cov.at(2, j) for j in (1, 2, 3))] == [(1, 2), (1, 2), (2, 2)]
    assert cov.at(2, 3).se == pytest.approx(0.0)
    assert cov.at(1, 2).se == pytest.approx(np.sqrt(0.75 * 0.25 / 4))
    with pytest.raises(KeyError):
        cov.at(1, 1, "warm")  # no warm steps: no warm cells


def test_coverage_is_monotone_in_j_and_bounded_by_the_no_hit_share():
    cov = topk_coverage(simulate_topk_steps(seed=1))
    for i in range(1, 4):
        rates_j = [cov.at(i, j).rate for j in range(1, 5)]
        assert rates_j == sorted(rates_j)
        assert rates_j[-1] < 1.0  # the simulation leaves 15% of targets out of the top-4


def test_non_greedy_drafts_are_flagged():
    steps = simulate_topk_steps(greedy=False, seed=2)
    cov = topk_coverage(steps)
    assert cov.top1_not_draft == cov.n_checked_top1 > 0
    assert cov.at(1, 1).rate != pytest.approx(cov.p_cond_at(1))
    assert "WARNING: top-1 != draft" in cov.summary()


def test_inconsistent_or_missing_topk_is_a_one_line_error():
    steps = simulate_topk_steps(n=50)
    with pytest.raises(AtlasError, match="SHADOW_TOPK"):
        topk_coverage(steps.drop(columns=["topk_ids"]))
    short = steps.copy()
    row = int(np.flatnonzero(short["k"] >= 2)[0])
    short.at[row, "topk_ids"] = short.at[row, "topk_ids"][:1]
    with pytest.raises(AtlasError, match=r"k=\d but topk_ids has 1 entries"):
        topk_coverage(short)


def test_cli_coverage(tmp_path, capsys):
    steps = simulate_topk_steps(n=200)
    write_run(tmp_path / "run", steps, arm="shadow")
    assert cli_main(["coverage", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "top-k coverage: shadow (K=3, top-4)" in out and "| all | 2 |" in out
    assert cli_main(["coverage", str(tmp_path / "run"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["topk"] == 4 and len(doc["cells"]) == 3 * 3 * 4  # turn classes x depths x j

    write_run(tmp_path / "plain", steps.drop(columns=["topk_ids"]), arm="plain")
    assert cli_main(["coverage", str(tmp_path / "plain")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "SHADOW_TOPK" in err

"""Tokens/s of arms timed in replicate runs (analysis/ladder/throughput.py): each run's economics.throughput
pooled by random effects, the ratio by replicates.log_ratio, and one run per arm marked "not a verdict"."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.economics import throughput
from atlas_ab.analysis.ladder.throughput import throughput_ratio
from atlas_ab.analysis.runs import load_run
from atlas_ab.analysis.stats.replicates import SINGLE, log_ratio, random_effects
from tests.helpers import synth


def _run(root, arm, ms: float, seed: int):
    """12 documents x 20 verify steps at batch width 1, each committing 2 tokens, steps ~ ms x (1 +- 5%)."""
    rng = np.random.default_rng(seed)
    n = 12 * 20
    s = pd.DataFrame({"doc_id": np.repeat(np.arange(12), 20), "turn": 0, "step": np.tile(np.arange(20), 12),
                      "k": np.full(n, 2, np.int32), "accept_len": np.ones(n, np.int32),
                      "step_ms": (ms * (1 + 0.05 * rng.standard_normal(n))).astype(np.float32),
                      "committed": [[1, 1]] * n, "conf": [[0.9, 0.9]] * n})
    root = synth.write_run(root, s, arm)
    m = json.loads((root / "manifest.json").read_text())
    m.update(mode="live", waves={"total": 1, "batch_width": 1}, levers={"num_drafts": 2})
    (root / "manifest.json").write_text(json.dumps(m))
    return load_run(root)


def test_arms_pooled_over_runs_and_their_ratio(tmp_path):
    a = [_run(tmp_path / f"a{i}", "draft_conf_000", ms, i) for i, ms in enumerate((1.0, 1.1, 0.95))]
    b = [_run(tmp_path / f"b{i}", "draft_conf_066", ms, 10 + i) for i, ms in enumerate((1.2, 1.3, 1.25))]
    r = throughput_ratio(a, b)
    ta, tb = [throughput(x) for x in a], [throughput(x) for x in b]
    pa = random_effects([t.value for t in ta], [t.se ** 2 for t in ta])
    pb = random_effects([t.value for t in tb], [t.se ** 2 for t in tb])
    assert r.control.pooled == pa and r.treatment.pooled == pb
    assert r.ratio == log_ratio(pb.mean / pa.mean, [((pa.se / pa.mean) ** 2, 2.0), ((pb.se / pb.mean) ** 2, 2.0)])
    # three runs an arm whose step levels differ by ~8%: the between-run variance dominates each arm's se
    assert pa.i2 > 0.5 and pb.i2 > 0.5 and r.ratio.df < 8 and not r.single_replicate
    assert r.ratio.value < 1 and not r.verdict().startswith(SINGLE)
    assert "| draft_conf_000 | 3 |" in r.summary()
    assert math.isfinite(r.to_dict()["lo"])


def test_one_run_an_arm_is_not_a_verdict(tmp_path):
    r = throughput_ratio([_run(tmp_path / "a", "a", 1.0, 0)], [_run(tmp_path / "b", "b", 2.0, 1)])
    assert r.single_replicate and r.slower and r.ratio.df == math.inf
    assert r.verdict().startswith(f"{SINGLE}: b over a: ") and r.verdict().endswith("slower")


def test_runs_of_two_arms_as_one_are_refused(tmp_path):
    with pytest.raises(AtlasError, match="replicates of one arm expected, got runs of a, b"):
        throughput_ratio([_run(tmp_path / "a", "a", 1.0, 0), _run(tmp_path / "b", "b", 1.0, 1)],
                         [_run(tmp_path / "c", "c", 1.0, 2)])


def test_the_cli_answers_and_refuses_in_one_line(tmp_path, capsys):
    from atlas_ab.analysis.__main__ import main
    a = [_run(tmp_path / f"a{i}", "tree_linear2", ms, i) for i, ms in enumerate((1.0, 1.05, 0.97))]
    b = [_run(tmp_path / f"b{i}", "tree_top2", ms, 10 + i) for i, ms in enumerate((1.1, 1.12, 1.08))]
    assert main(["throughput", "--control", *map(str, (r.path for r in a)),
                 "--treatment", *map(str, (r.path for r in b)), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["single_replicate"] is False and out["control"]["arm"] == "tree_linear2"
    assert len(out["treatment"]["per_run"]) == 3
    assert main(["throughput", "--control", str(a[0].path), str(b[0].path), "--treatment", str(b[1].path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "replicates of one arm expected, got runs of tree_linear2, tree_top2" in err[0]

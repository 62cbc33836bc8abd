"""Timing on several machines (analysis/ladder/machines.py): a golden two-stage pool worked by hand, one
machine unchanged, and the CLI's `--machines` with its refusals."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from atlas_ab import AtlasError
from atlas_ab.analysis.__main__ import main
from atlas_ab.analysis.ladder.machines import OnMachines, on_machines, one_stage, pool
from atlas_ab.analysis.stats.replicates import random_effects
from tests.analysis.test_ladder_cli import COST, _run


def test_two_machines_pooled_by_hand():
    """Machine A: jobs [1, 3] and [3, 5] (means 2, 4; se^2 = 2/2 = 1 each): FE 3, Q 2, c 1, tau^2 1, w* 1/2,
    mean 3, se^2 = max(DL 1, HK 1) = 1. Machine B: [5, 7] twice (means 6, 6; se^2 1): Q 0, tau^2 0, mean 6,
    se^2 = max(DL 1/2, HK 0) = 1/2. Machines: y (3, 6), v (1, 1/2): w (1, 2), FE 5, Q = 4 + 2 = 6,
    c = 3 - 5/3 = 4/3, tau^2 = (6 - 1) / (4/3) = 15/4; w* = (4/19, 4/17), sum 144/323, mean = 660/144 = 55/12;
    se_DL^2 = 323/144, se_HK^2 = (19/36 + 17/36) / (144/323) = 323/144; t of 1 df; I^2 = 5/6."""
    a = one_stage([np.array([1.0, 3.0]), np.array([3.0, 5.0])])
    assert (a.mean, a.se ** 2, a.tau2) == pytest.approx((3.0, 1.0, 1.0), abs=1e-12)
    cell = OnMachines(((np.array([1.0, 3.0]), np.array([3.0, 5.0])), (np.array([5.0, 7.0]), np.array([5.0, 7.0]))))
    re = pool(cell)
    assert re.n == 2 and re.df == 1 and len(cell) == 4
    assert re.mean == pytest.approx(55 / 12, abs=1e-12)
    assert re.se == pytest.approx(math.sqrt(323) / 12, abs=1e-12)
    assert re.tau2 == pytest.approx(15 / 4, abs=1e-12) and re.i2 == pytest.approx(5 / 6, abs=1e-12)
    assert re.q_p == pytest.approx(stats.chi2.sf(6, 1), abs=1e-12)
    lo, hi = re.interval
    assert hi - re.mean == pytest.approx(stats.t.ppf(0.975, 1) * math.sqrt(323) / 12, rel=1e-6)   # 12.7 x se
    assert lo < 3 and hi > 6       # two machines that disagree settle nothing between them


def test_one_machine_is_its_replicates_exactly_as_before():
    rng = np.random.default_rng(0)
    reps = [rng.gamma(50, 1 / 50, 30) for _ in range(3)]
    old = random_effects([float(np.mean(t)) for t in reps],
                         [(float(np.std(t, ddof=1)) / math.sqrt(len(t))) ** 2 for t in reps])
    assert pool(reps) == old            # bit for bit: no number of a one-machine ladder moves


def test_machines_must_time_the_same_grid():
    m1 = {(1, 0): [np.ones(3)], (1, 1): [np.ones(3)]}
    m2 = {(1, 0): [np.ones(3)]}
    with pytest.raises(AtlasError, match=r"machine 2 and machine 1 timed different cells \(B=1 K=1"):
        on_machines([m1, m2])
    with pytest.raises(AtlasError, match=">= 2 machines"):
        pool(OnMachines(((np.ones(3),),)))


@pytest.mark.slow        # two synthetic sweeps of twelve runs, then the CLI
def test_ladder_cli_pools_machines(tmp_path, capsys):
    sweeps = []
    for m in range(2):
        d = tmp_path / f"machine{m}"
        for r in range(2):
            for (b, k) in COST:
                _run(d, b, k, seed=1000 * m + 100 * r + 10 * b + k, rep=r)
        sweeps.append(d)
    out = tmp_path / "out"
    assert main(["ladder", *map(str, sweeps), "--machines", "--out", str(out), "--bootstrap", "0"]) == 0
    text = capsys.readouterr().out
    assert "replicates per cell: 4 on 2 machines" in text
    lad = json.loads((out / "ladder.json").read_text())
    assert lad["machines"] == 2 and {c["replicates"] for c in lad["cells"]} == {4}
    assert {c["t_df"] for c in lad["cells"]} == {1.0}
    # without --machines the two sweeps' replicate ids collide, by name
    assert main(["ladder", *map(str, sweeps), "--out", str(tmp_path / "o2")]) == 2
    assert "a second run at batch width" in capsys.readouterr().err
    assert main(["ladder", str(sweeps[0]), "--machines", "--out", str(tmp_path / "o3")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give each machine's runs as one RUNS argument, >= 2 of them" in err[0]
    assert main(["ladder", *map(str, sweeps), "--machines", "--method", "bootstrap",
                 "--out", str(tmp_path / "o4")]) == 2
    assert "the bootstrap has no machine level" in capsys.readouterr().err


def _in_process(path, process):
    m = json.loads((path / "manifest.json").read_text())
    m["host"] = {"hostname": "h", "process": process}
    (path / "manifest.json").write_text(json.dumps(m))


def test_the_ladder_says_whether_each_cells_replicates_ran_in_separate_processes(tmp_path, capsys):
    """One sweep a process (a directory of sweeps, as scripts/gpu.sh ladder writes it) against every
    replicate in one process, and runs that do not record their process."""
    for r in range(2):
        for (b, k) in COST:
            _in_process(_run(tmp_path / "apart" / f"r{r}", b, k, seed=100 * r + 10 * b + k, rep=r), f"h:{r}:0.0")
            _in_process(_run(tmp_path / "one", b, k, seed=100 * r + 10 * b + k, rep=r), "h:7:0.0")
            _run(tmp_path / "old", b, k, seed=100 * r + 10 * b + k, rep=r)
    said = {}
    for name in ("apart", "one", "old"):
        assert main(["ladder", str(tmp_path / name), "--out", str(tmp_path / f"o_{name}"), "--bootstrap", "0"]) == 0
        said[name] = [n for n in json.loads((tmp_path / f"o_{name}" / "ladder.json").read_text())["notes"]
                      if "process" in n]
    capsys.readouterr()
    assert said["apart"] == ["every cell's replicates ran in separate processes (2 in all): the between-process "
                             "variance is inside each interval"]
    assert len(said["one"]) == 1 and said["one"][0].startswith(
        "6 of 6 cells have replicates that ran in one process (B=1 K=0, B=1 K=1, B=1 K=2, B=4 K=0, ...)")
    assert len(said["old"]) == 1 and "do not record their process" in said["old"][0]

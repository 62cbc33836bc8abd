"""Steps pair between runs by (doc_id, turn, position) only where both arms committed the same text:
greedy runs, or sampled runs replaying one stored trajectory. Live sampled arms are refused."""
from pathlib import Path

import pandas as pd
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.comparison import between_runs, paired_difference
from atlas_ab.analysis.runs import Run


def run(name, temperature, mode="live", traj=None):
    steps = pd.DataFrame({"doc_id": [0, 0, 1], "turn": [0, 0, 0], "position": [5, 7, 5], "step": [0, 1, 0],
                          "k": [2, 2, 2], "accept_len": [1, 2, 0]})
    manifest = {"config": {"workload": {"sampling": {"temperature": temperature}}}, "mode": mode,
                "replay": {"hash": traj} if traj else None, "levers": {"num_drafts": 2}}
    return Run(path=Path(name), arm=name, manifest=manifest, steps=steps, files=())


@pytest.mark.parametrize("a, b", [
    (run("g_a", 0.0), run("g_b", 0.0)),
    (run("r_a", 0.7, "replay", "sha256:t1"), run("r_b", 0.7, "replay", "sha256:t1")),
])
def test_same_text_pairs(a, b):
    assert between_runs(a, b, 1).n_pairs == 3
    assert paired_difference(a, b, "p1", n_boot=0).n_pairs == 3


@pytest.mark.parametrize("a, b, why", [
    (run("live_a", 0.7), run("live_b", 0.7), "live sampled run"),
    (run("r_a", 0.7, "replay", "sha256:t1"), run("live_b", 0.7), "live sampled run"),
    (run("r_a", 0.7, "replay", "sha256:t1"), run("r_b", 0.7, "replay", "sha256:t2"), "different trajectories"),
])
def test_different_texts_are_refused(a, b, why):
    for f in (lambda: between_runs(a, b, 1), lambda: paired_difference(a, b, "p1", n_boot=0)):
        with pytest.raises(AtlasError, match=why):
            f()

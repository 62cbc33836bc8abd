"""The gate's power (bench/bench_gate_power.py): a lossy bug injected into greedy verification from the
outside (bench/lossy.py) fails the default CPU gate; a clean run passes it."""
import sys
from pathlib import Path

import pytest

from atlas_ab.config.structured import ArmConfig, ModelConfig, RunnerConfig, WorkloadConfig

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from lossy import Lossy  # noqa: E402

sys.path.remove(str(ROOT / "bench"))


@pytest.fixture(scope="module")
def runner():
    """The shipped model on the CPU with the run's defaults (fp32, 2 gated sequences a wave), one wave
    of the two sequences the gate checks, 2 turns x 32 tokens."""
    from atlas_ab.run.runner import Runner
    return Runner(ArmConfig(name="refeed_on", catchup=True, refeed=True), ModelConfig(),
                  WorkloadConfig(n_docs=2, turns=2), RunnerConfig(device="cpu", cuda_graphs=False))


def _run(runner, bug, rate, seed):
    docs = runner.docs_of(0)
    lossy = Lossy(bug, rate, docs, runner.workload.gen_tokens, rows_per_run=len(docs), seed0=seed)
    with lossy.installed():
        res = runner.run_wave(0)
    return res.gate, lossy


def test_a_clean_run_passes_the_default_cpu_gate(runner):
    g, lossy = _run(runner, "wrong_accept", 0.0, 0)
    assert g["passed"] and g["checked_sequences"] == 2 and g["divergences"] == 0 and not lossy.hits
    assert g["checked_tokens"] == 2 * 2 * 32


def test_a_one_percent_wrong_accept_fails_the_default_cpu_gate(runner):
    """Seeded: the first seed whose bug reaches the committed text fails the gate there (fp32: a wrong
    draft is never within the bound of the fp32 top-1 unless it ties it); a seed that hits nothing
    passes."""
    for seed in range(4):
        g, lossy = _run(runner, "wrong_accept", 0.01, seed)
        if not lossy.hits:
            assert g["passed"] is True
            continue
        assert g["passed"] is False and g["first_divergence"]["verdict"] == "clear margin"
        first = min(lossy.hits, key=lambda h: (h[0], h[1]))
        d = g["first_divergence"]
        assert (d["doc_id"], d["speculative"]) == (runner.docs_of(0)[first[0]].doc_id, first[2])
        return
    pytest.fail("no seed of 0..3 hit a rejected draft at 1%")

"""The gate's near-tie bound, measured per run (speculative/precision.py): the shipped model in bf16
on the CPU measures a bound below the ceiling and the manifest records it and where it came from;
an fp32 run and a measurement not below the ceiling record the ceiling, saying why."""
import json

import pytest
import torch

from atlas_ab.config.structured import ArmConfig, ModelConfig, RunnerConfig, WorkloadConfig
from atlas_ab.speculative import precision
from atlas_ab.speculative.precision import FORWARD_ERROR, SAFETY, calibrate, calibration_tokens
from tests.helpers.cli import cli
from tests.helpers.tiny import tiny_docs, tiny_models

TINY_WL = WorkloadConfig(n_docs=4, turns=2, chunk_tokens=16, gen_tokens=8)


def test_the_shipped_model_in_bf16_measures_a_bound_below_the_ceiling_and_its_gate_uses_it():
    from atlas_ab.run.runner import Runner
    r = Runner(ArmConfig(name="refeed_on", catchup=True, refeed=True), ModelConfig(), TINY_WL,
               RunnerConfig(device="cpu", dtype="bfloat16"))
    b = r.near_tie
    assert (b.source, b.calibration["dtype"], b.calibration["device"]) == ("measured", "bfloat16", "cpu")
    assert 0 < b.measured and b.forward_error == SAFETY * b.measured < FORWARD_ERROR
    g = r.run_wave(0).gate
    assert g["near_tie_bound"] == b.to_dict() and g["status"] == "passed"


@pytest.mark.slow
def test_the_shipped_model_in_bf16_on_the_cpu_records_a_bound_below_the_ceiling(tmp_path):
    d = tmp_path / "run"
    rc, out, err = cli("+arm=refeed_on", "runner.dtype=bfloat16", "runner.device=cpu", "workload=tiny",
                       "runner.progress=false", f"hydra.run.dir={d}")
    assert rc == 0, err
    m = json.loads((d / "manifest.json").read_text())
    b = m["gate"]["near_tie_bound"]
    assert m["dtype"] == "bfloat16" and m["gate"]["status"] == "passed"
    assert b["source"] == "measured" and b["ceiling"] == FORWARD_ERROR and b["safety"] == SAFETY
    assert 0 < b["measured"] and b["forward_error"] == pytest.approx(SAFETY * b["measured"], rel=1e-12)
    assert b["forward_error"] < FORWARD_ERROR
    assert b["calibration"] == {"sequences": 4, "tokens": 4 * 32, "dtype": "bfloat16", "device": "cpu"}
    assert m["shards"][0]["gate"]["near_tie_bound"] == b
    # each arbitration (if any) used it: bound = 2 E u m
    for x in m["gate"]["arbitrations"]:
        assert x["bound"] == pytest.approx(2 * b["forward_error"] * 2 ** -8 * max(x["magnitude"], 1.0))


def test_an_fp32_run_records_the_ceiling():
    from atlas_ab.run.runner import Runner
    r = Runner(ArmConfig(name="refeed_on", catchup=True, refeed=True), ModelConfig(), TINY_WL,
               RunnerConfig(device="cpu"))
    assert r.near_tie.source == "ceiling" and r.near_tie.forward_error == FORWARD_ERROR
    assert "fp32" in r.near_tie.why
    g = r.run_wave(0).gate
    assert g["near_tie_bound"] == r.near_tie.to_dict() and g["passed"]


def test_a_measurement_not_below_the_ceiling_gives_the_ceiling(monkeypatch):
    trunk, _ = tiny_models()
    t16 = precision.trunk_in(trunk, torch.bfloat16)
    toks = calibration_tokens(tiny_docs(n=4, turns=2, chunk=10))
    assert toks.shape == (4, 20)
    b = calibrate(t16, toks)
    assert b.source == "measured" and b.forward_error == SAFETY * b.measured < FORWARD_ERROR
    monkeypatch.setattr(precision, "SAFETY", FORWARD_ERROR / b.measured)
    c = calibrate(t16, toks)
    assert (c.source, c.forward_error, c.measured) == ("ceiling", FORWARD_ERROR, b.measured) and "not below" in c.why

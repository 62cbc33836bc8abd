"""`python -m atlas_ab.analysis ladder`: synthetic ladder sweeps in, engine configs out."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from atlas_ab.analysis.__main__ import main
from atlas_ab.analysis.ladder import ranges, trtllm_config, vllm_config
from tests.helpers.synth import simulate_steps, write_run

N_DOCS, TURNS, PER = 16, 2, 12
# (B, K) -> mean batched step ms: at B=1 K=2 pays (E_2 = 2.19 for 1.2 ms), at B=4 nothing does
COST = {(1, 0): 1.0, (1, 1): 1.1, (1, 2): 1.2, (4, 0): 2.0, (4, 1): 4.0, (4, 2): 6.0}


def _run(root, b, k, seed, rep=None):
    n = N_DOCS * TURNS * PER
    if k:
        s = simulate_steps(n, p_cond=(0.7, 0.7)[:k], K=k, n_docs=N_DOCS, turns=TURNS, seed=seed)
    else:
        s = simulate_steps(n, p_cond=(0.7,), K=1, n_docs=N_DOCS, turns=TURNS, seed=seed)
        s["k"], s["accept_len"] = 0, 0
    s = s.sort_values(["doc_id", "turn", "step"]).reset_index(drop=True)
    wave = s["doc_id"] // b
    batched = s.assign(w=wave).groupby(["w", "turn", "step"]).ngroup().to_numpy()
    rng = np.random.default_rng(seed)
    per = COST[(b, k)] * rng.gamma(50, 1 / 50, batched.max() + 1)
    s["step_ms"] = per[batched].astype(np.float32)
    s["committed"] = [[1] * (1 + a) for a in s["accept_len"]]
    name = f"k{k}_b{b}" + ("" if rep is None else f"_r{rep}")
    path = write_run(root / name, s, name, shards=N_DOCS // b)
    m = json.loads((path / "manifest.json").read_text())
    m.update(mode="live", loop="step_by_step", fused=False, waves={"total": N_DOCS // b, "batch_width": b},
             levers={"num_drafts": k, "catchup": False, "refeed": False},
             model={"name": "synthetic", "hash": "sha256:model", "init": "random", "params": {"total": 1e6}})
    for i, sh in enumerate(m["shards"]):
        sh["wave"] = i
    if rep is not None:            # a +study=ladder job's record of its replicate (its resolved config)
        m["config"] = {"study": {"name": "ladder", "replicates": 3, "replicate": rep}}
    (path / "manifest.json").write_text(json.dumps(m))
    return path


@pytest.fixture
def sweep(tmp_path):
    return [_run(tmp_path / "sweep", b, k, seed=10 * b + k) for (b, k) in COST]


@pytest.mark.slow          # twelve synthetic runs written, then the CLI with its figures (~25 s)
def test_ladder_cli_writes_every_config(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["ladder", *map(str, sweep), "--out", str(out), "--bootstrap", "200",
                 "--allow-single-replicate"]) == 0
    text = capsys.readouterr().out
    assert "| 1 | 2 | 2 |" in text and "no K pays" in text and "single replicate: not a verdict" in text
    lad = json.loads((out / "ladder.json").read_text())
    assert lad["ladder"] == {"1": 2, "4": 0}
    assert lad["ranges"] == [[1, 3, 2], [4, 4, 0]]
    assert "--allow-single-replicate" in (out / "vllm_speculative_config.json.NOTE").read_text()
    v = json.loads((out / "vllm_speculative_config.json").read_text())   # vLLM's object itself, unwrapped
    assert v == {"method": "mtp", "num_speculative_tokens": 2,
                 "num_speculative_tokens_per_batch_size": [[1, 3, 2], [4, 4, 0]]}
    t = yaml.safe_load((out / "trtllm_extra_llm_api_options.yaml").read_text())["speculative_config"]
    assert t == {"max_draft_len": 2, "draft_len_schedule": {3: 2}}
    env = (out / "atlas_mtp_ladder.env").read_text().splitlines()
    assert "# batch width 1-3: K=2" in env and "ATLAS_MTP_NUM_DRAFTS=2" in env
    assert "# batch width 4-4: K=0" in env and "--allow-single-replicate" in env[0]
    assert (out / "ladder.png").stat().st_size > 0 and (out / "ladder_throughput.png").stat().st_size > 0


@pytest.mark.slow          # eighteen synthetic runs written, then the CLI with its figures
def test_ladder_cli_pools_replicates_and_writes_configs_without_the_flag(tmp_path, capsys):
    runs = [_run(tmp_path / "sweep", b, k, seed=100 * r + 10 * b + k, rep=r) for r in range(3) for (b, k) in COST]
    out = tmp_path / "out"
    assert main(["ladder", *map(str, runs), "--out", str(out), "--bootstrap", "0"]) == 0
    text = capsys.readouterr().out
    assert "replicates per cell: 3 (random effects over replicates decide)" in text
    lad = json.loads((out / "ladder.json").read_text())
    assert lad["verdict"] == "replicated" and {c["replicates"] for c in lad["cells"]} == {3}
    assert lad["ladder"] == {"1": 2, "4": 0}
    assert "atlas_ab_note" not in json.loads((out / "vllm_speculative_config.json").read_text())
    # a replicate given twice is refused by name
    assert main(["ladder", *map(str, runs + runs[:1]), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a second run at batch width 1 K=0, replicate 0" in err[0]


@pytest.mark.slow
def test_ladder_cli_refuses_a_missing_plain_decode(sweep, tmp_path, capsys):
    runs = [p for p in sweep if p.name != "k0_b4"]
    assert main(["ladder", *map(str, runs), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no K=0 (plain decode) timing at batch width 4" in err[0]
    assert not (tmp_path / "o").exists()


def test_ranges_and_engine_formats():
    assert ranges({1: 3, 4: 3, 8: 2, 16: 0}, max_batch=64) == [(1, 7, 3), (8, 15, 2), (16, 64, 0)]
    rs = ranges({1: 3, 8: 2, 16: 0})
    assert vllm_config(rs)["num_speculative_tokens_per_batch_size"] == [[1, 7, 3], [8, 15, 2], [16, 16, 0]]
    # TensorRT-LLM: keys are upper bounds; past the largest key it is off, so the K=0 tail is implicit
    assert trtllm_config(rs) == ({"max_draft_len": 3, "draft_len_schedule": {7: 3, 15: 2}}, None)
    cfg, why = trtllm_config(ranges({1: 1, 8: 2}))
    assert cfg is None and "rises after batch size 7" in why
    assert vllm_config(ranges({1: 0, 8: 0})) is None


def test_acceptance_comes_from_the_widest_width_that_has_every_k(sweep):
    """Greedy acceptance does not depend on B: each K is read once, at the widest width with every K
    (B=4 here), not pooled over widths (that would count a document once per width, and mix cluster
    units where narrow workloads cluster by document and wide ones by source file)."""
    from atlas_ab import AtlasError
    from atlas_ab.analysis.ladder import acceptance_from
    from atlas_ab.analysis.runs import load_run
    runs = {p.name: load_run(p) for p in sweep}
    acc, unit, width = acceptance_from(list(runs.values()))
    assert width == 4 and unit == "document" and sorted(acc) == [1, 2]
    for k in (1, 2):
        s = runs[f"k{k}_b4"].steps
        assert int(acc[k].steps.sum()) == int((s["k"] >= 1).sum())      # that run's steps, once
    with pytest.raises(AtlasError, match="no batch width has a run of every K"):
        acceptance_from([runs["k1_b1"], runs["k2_b4"]])


def test_a_second_acceptance_run_of_one_cell_is_refused(sweep):
    from atlas_ab import AtlasError
    from atlas_ab.analysis.ladder import acceptance_from
    from atlas_ab.analysis.runs import load_run
    run = load_run(sweep[1])
    with pytest.raises(AtlasError, match="a second acceptance run at batch width 1 K=1"):
        acceptance_from([run, run])

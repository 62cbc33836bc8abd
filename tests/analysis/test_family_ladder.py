"""The family ladder (analysis/ladder/families.py): which drafter family to serve at each batch width, from
a `+study=families_ladder` timing sweep and the `+study=families` paired replay, on synthetic runs."""
from __future__ import annotations

import json

import numpy as np
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.__main__ import main
from atlas_ab.analysis.cli import load_each
from atlas_ab.analysis.ladder.families import family_of, inputs, order_of
from tests.helpers.synth import simulate_steps, write_run


def load(paths):
    return load_each(list(paths), False)


FAMILIES = ["plain", "ngram", "baseline"]      # the study's order: option 0 plain, 1 ngram, 2 baseline
LEVERS = {"plain": dict(num_drafts=0, proposer="mtp"), "ngram": dict(num_drafts=2, proposer="ngram"),
          "baseline": dict(num_drafts=2, proposer="mtp")}
N_DOCS, TURNS, PER = 16, 2, 12
# (B, family) -> mean batched step ms. E: ngram drafts on half its steps, (0.8, 0.8) when it does:
# 0.5 x 1 + 0.5 x 2.44 = 1.72; baseline (0.6, 0.6): 1.96. At B=1 ngram wins (1.72 / 1.05 = 1.64 tokens
# per ms against plain's 1.00 and baseline's 1.51); at B=4 plain decode does (4 / 2 = 2.00 against ngram's
# 4 x 1.72 / 4.0 = 1.72 and baseline's 4 x 1.96 / 5.0 = 1.57).
COST = {(1, "plain"): 1.0, (1, "ngram"): 1.05, (1, "baseline"): 1.3,
        (4, "plain"): 2.0, (4, "ngram"): 4.0, (4, "baseline"): 5.0}


def _levers(fam):
    return {"catchup": False, "refeed": False, "drafter_prefill": False, **LEVERS[fam]}


def _steps(fam, seed):
    n = N_DOCS * TURNS * PER
    if fam == "plain":
        s = simulate_steps(n, p_cond=(0.7,), K=1, n_docs=N_DOCS, turns=TURNS, seed=seed)
        s["k"], s["accept_len"] = 0, 0
    elif fam == "ngram":
        s = simulate_steps(n, p_cond=(0.8, 0.8), n_docs=N_DOCS, turns=TURNS, serial_frac=0.5, seed=seed)
    else:
        s = simulate_steps(n, p_cond=(0.6, 0.6), n_docs=N_DOCS, turns=TURNS, seed=seed)
    return s.sort_values(["doc_id", "turn", "step"]).reset_index(drop=True)


def _manifest(path, **fields):
    m = json.loads((path / "manifest.json").read_text())
    m.update(model={"name": "synthetic", "hash": "sha256:model", "init": "random", "params": {"total": 1e6}},
             **fields)
    (path / "manifest.json").write_text(json.dumps(m))
    return path


def timing_run(root, b, fam, rep, families=FAMILIES, seed=0):
    s = _steps(fam, seed)
    batched = s.assign(w=s["doc_id"] // b).groupby(["w", "turn", "step"]).ngroup().to_numpy()
    per = COST[(b, fam)] * np.random.default_rng(seed).gamma(50, 1 / 50, batched.max() + 1)
    s["step_ms"] = per[batched].astype(np.float32)
    s["committed"] = [[1] * (1 + a) for a in s["accept_len"]]
    name = f"{fam}_b{b}_r{rep}"
    path = write_run(root / name, s, name, shards=N_DOCS // b)
    m = json.loads((path / "manifest.json").read_text())
    for i, sh in enumerate(m["shards"]):       # one shard a wave, as a live run writes them
        sh["wave"] = i
    (path / "manifest.json").write_text(json.dumps(m))
    return _manifest(path, mode="live", loop="step_by_step", fused=False,
                     waves={"total": N_DOCS // b, "batch_width": b},
                     levers=_levers(fam), host={"process": f"host:{rep}"},
                     config={"study": {"name": "families_ladder", "families": list(families), "family": fam,
                                       "replicates": 3, "replicate": rep}})


def acceptance_run(root, fam, seed=0, **levers):
    path = write_run(root / fam, _steps(fam, seed), fam)
    return _manifest(path, mode="replay", waves={"total": 1, "batch_width": 64}, levers={**_levers(fam), **levers},
                     config={"study": {"name": "families", "arms": ["baseline", "ngram"]}})


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    timing = [timing_run(root / "ladder", b, f, r, seed=100 * r + 10 * b + FAMILIES.index(f))
              for r in range(3) for (b, f) in COST]
    accept = [acceptance_run(root / "acc", f, seed=i + 7) for i, f in enumerate(("ngram", "baseline"))]
    return root, timing, accept


def test_each_run_names_its_family_and_plain_comes_first(study):
    _, timing, accept = study
    runs = load(timing)
    assert sorted({family_of(r) for r in runs}) == ["baseline", "ngram", "plain"]
    assert [family_of(r) for r in load(accept)] == ["ngram", "baseline"]      # the families study: the arm's name
    assert order_of(runs) == ["plain", "ngram", "baseline"]


def test_the_inputs_pair_each_timed_family_with_its_acceptance_run(study):
    _, timing, accept = study
    acc, times, names, unit = inputs(load(timing), load(accept))
    assert names == {0: "plain", 1: "ngram", 2: "baseline"} and unit == "document"
    assert sorted(times) == [(1, 0), (1, 1), (1, 2), (4, 0), (4, 1), (4, 2)]
    assert all(len(reps) == 3 for reps in times.values())
    # ngram's acceptance counts its no-draft steps: one committed token each
    a = load(accept)[0].steps
    assert acc[1].E == pytest.approx(1 + a["accept_len"].mean(), abs=1e-12)
    assert (a["k"] == 0).mean() == pytest.approx(0.5, abs=0.05)


@pytest.mark.slow          # 18 synthetic runs through the CLI with its figures
def test_the_cli_serves_a_family_per_width_as_vllm_configs(study, capsys):
    root, timing, accept = study
    out = root / "out"
    assert main(["ladder", *map(str, timing), "--acceptance", *map(str, accept), "--out", str(out),
                 "--bootstrap", "0"]) == 0
    text = capsys.readouterr().out
    assert "Family ladder: committed tokens/s = B x E[1 + accepted | family] / step time" in text
    assert "| B | serve family | best family | over plain | over next-best | tied | answer |" in text
    lad = json.loads((out / "ladder.json").read_text())
    assert lad["ladder"] == {"1": "ngram", "4": "plain"}
    assert lad["families"] == {"0": "plain", "1": "ngram", "2": "baseline"}
    assert lad["choices"]["1"]["verdict"].startswith("ngram pays: ngram ")
    assert lad["choices"]["4"]["verdict"] == "no family pays: plain decode is the fastest"
    v = json.loads((out / "families_vllm.json").read_text())
    assert v == {"speculative_config_by_batch_width": {
        "1": {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5, "prompt_lookup_max": 5},
        "4": None}}
    assert (out / "ladder.png").stat().st_size > 0 and (out / "ladder_throughput.png").stat().st_size > 0


def test_a_timed_family_without_an_acceptance_run_is_refused(study):
    _, timing, accept = study
    with pytest.raises(AtlasError, match="no acceptance run of family 'baseline' \\(timed\\); the families study"):
        inputs(load(timing), load(accept[:1]))


def test_an_acceptance_run_of_another_drafter_is_refused(study, tmp_path):
    _, timing, accept = study
    other = acceptance_run(tmp_path, "baseline", refeed=True)
    with pytest.raises(AtlasError, match="family 'baseline''s acceptance run is not the drafter timed "
                                         "\\(refeed True vs False\\)"):
        inputs(load(timing), load([accept[0], other]))


def test_a_second_acceptance_run_of_one_family_is_refused(study):
    _, timing, accept = study
    with pytest.raises(AtlasError, match="a second acceptance run of family 'ngram'"):
        inputs(load(timing), load([*accept, accept[0]]))


def test_a_family_list_without_plain_decode_is_refused(tmp_path):
    runs = [timing_run(tmp_path, 1, f, 0, families=["ngram", "baseline"]) for f in ("ngram", "baseline")]
    with pytest.raises(AtlasError, match="has no plain decode, the floor every family's gain is taken over"):
        order_of(load(runs))


def test_the_cli_says_it_needs_the_families_study(study, capsys):
    root, timing, _ = study
    assert main(["ladder", *map(str, timing), "--out", str(root / "o2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a family ladder takes acceptance from the families study's paired replay" in err[0]
    assert not (root / "o2").exists()

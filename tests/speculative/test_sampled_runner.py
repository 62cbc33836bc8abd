"""A sampled run end to end through the real runner (tiny checkpoint, CPU): live and replay pass the
distributional gate, and so does a sampled tree arm live; a lossy sampler (injected in-process)
fails the run; bad sampling configs are one line before any model loads."""
import json

import pytest

from tests.run.test_cli import cli, manifest, tiny_ckpt  # noqa: F401  (the fixture)

SAMPLED = ["+arm=refeed_on", "workload=tiny", "workload.gen_tokens=16", "workload.sampling.temperature=0.7"]


def _overrides(ckpt, d, *extra):
    return [*SAMPLED, "model=path", f"model.path={ckpt}", f"hydra.run.dir={d}", *extra]


@pytest.mark.slow
def test_sampled_run_live_and_replay_pass_the_gate(tmp_path, tiny_ckpt):  # noqa: F811
    traj = f"runner.trajectories={tmp_path / 'traj'}"
    for mode in ("live", "replay"):
        d = tmp_path / mode
        rc, out, err = cli(*_overrides(tiny_ckpt, d, f"runner.mode={mode}", traj))
        assert rc == 0, err
        m = manifest(d)
        assert m["status"] == "complete" and m["gate"]["passed"] is True, m["gate"]
        assert "distribution" in m["gate"]["by"] and all(k["p_value"] >= k["alpha"] for k in m["gate"]["ks"])
        assert m["workload"]["sampling"]["temperature"] == 0.7 and "lossless gate passed" in out
    assert (tmp_path / "traj").is_dir()


@pytest.mark.slow
def test_sampled_tree_run_passes_the_gate(tmp_path, tiny_ckpt):  # noqa: F811
    """+arm=tree_top2 at T=0.7, live: the distributional gate runs on its PITs, as a sampled chain's."""
    d = tmp_path / "tree"
    rc, out, err = cli(*[a.replace("+arm=refeed_on", "+arm=tree_top2") for a in _overrides(tiny_ckpt, d)])
    assert rc == 0, err
    m = manifest(d)
    assert m["status"] == "complete" and m["gate"]["passed"] is True, m["gate"]
    assert "distribution" in m["gate"]["by"] and all(k["p_value"] >= k["alpha"] for k in m["gate"]["ks"])
    assert m["levers"]["tree"] == "topk:2,1" and "lossless gate passed" in out


def _compose(overrides):
    from hydra import compose, initialize_config_dir

    from atlas_ab.config.hydra_schema import CONF_DIR
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="t"):
        return compose(config_name="config", overrides=overrides)


@pytest.mark.slow
def test_a_lossy_sampler_fails_the_run(tmp_path, tiny_ckpt, monkeypatch):  # noqa: F811
    from atlas_ab import AtlasError
    from atlas_ab.run.session import run
    from atlas_ab.speculative import sampling
    monkeypatch.setattr(sampling, "_residual", lambda p, q, x: p)      # resample from p, not the residual
    d = tmp_path / "lossy"
    cfg = _compose([*SAMPLED, "workload.n_docs=16", "runner.progress=false", "model=path",
                    f"model.path={tiny_ckpt}"])
    with pytest.raises(AtlasError, match="lossless gate failed: the committed tokens are not draws"):
        run(cfg, d)
    m = json.loads((d / "manifest.json").read_text())
    assert m["status"] == "failed" and m["gate"]["passed"] is False


BAD = {
    "top_p at greedy": ({"top_p": 0.9}, "top_p=0.9 has no effect at temperature=0"),
    "negative temperature": ({"temperature": -1.0}, "out of range"),
    "hot": ({"temperature": 11.0}, "out of range"),
    "top_p past 1": ({"temperature": 1.0, "top_p": 1.5}, "top_p=1.5"),
    "negative top_k": ({"temperature": 1.0, "top_k": -1}, "top_k=-1"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_sampling_is_refused(case):
    from atlas_ab import AtlasError
    from atlas_ab.config.structured import SamplingConfig, validate_sampling
    fields, must = BAD[case]
    with pytest.raises(AtlasError, match=must.replace("(", r"\(").replace(")", r"\)")):
        validate_sampling(SamplingConfig(**fields))


@pytest.mark.parametrize("args,must", [
    (["+arm=baseline", "arm.draft_policy=greedy"], "draft_policy has no effect"),
    (["+arm=baseline", "workload.sampling.temperature=1", "arm.draft_policy=nucleus"], "draft_policy='nucleus'"),
    (["+arm=tree_top2", "workload.sampling.temperature=0.7", "arm.draft_policy=sampled"], "draft_policy=sampled"),
    (["+arm=tree_top2", "workload.sampling.temperature=0.7", "runner.mode=replay"], "runner.mode=replay"),
], ids=["draft policy at greedy", "unknown policy", "tree with sampled drafts", "sampled tree replay"])
def test_bad_sampling_is_one_line(tmp_path, args, must):
    from tests.helpers.faults import main_of
    d = tmp_path / "run"
    rc, err = main_of("atlas_ab", [*args, f"hydra.run.dir={d}", "runner.device=cpu"])    # python -m, in-process
    assert rc == 2 and must in err and len(err.strip().splitlines()) == 1, err
    assert not (d / "steps").exists()

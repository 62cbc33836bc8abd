"""bench/bench_peer.py's arithmetic on small literal inputs, every figure computed by hand.

The end-to-end run (llama.cpp built, served, collected, beside our runner) is
`TINY=1 CUDA=0 bash scripts/llamacpp_peer.sh`; here only the numbers it prints are checked.
"""
import hashlib
import json
from pathlib import Path

import pytest

from atlas_ab import AtlasError
from tests.e2e.test_bench_smoke import bench_module

bp = bench_module("bench_peer")
R = bp.EngineRequest

# two documents x two turns, G = 8: decode steps = predicted - 1 - accepted = 5, 4, 6, 4
REQS = [R(0, 0, 8, 7, 2, 0.5), R(0, 1, 8, 5, 3, 0.25), R(1, 0, 8, 9, 1, 0.4), R(1, 1, 8, 6, 3, 0.3)]


def test_engine_counts_and_rates():
    s = bp.engine_side(REQS, concurrency=2, label="llama.cpp", startup_s=1.5)
    # both documents in flight: the window is the longer document, max(0.5 + 0.25, 0.4 + 0.3) = 0.75
    assert s.work_s == pytest.approx(0.75)
    assert (s.requests, s.committed, s.steps, s.steps_lo, s.drafted, s.accepted) == (4, 32, 19, 15, 27, 9)
    r = bp.rates(s)
    assert r["tokens_per_s"] == pytest.approx(32 / 0.75)          # 42.667
    assert r["steps_per_s"] == pytest.approx(19 / 0.75)           # 25.333
    assert r["steps_per_s_lo"] == pytest.approx(20.0)             # 15 / 0.75
    assert r["mean_accepted"] == pytest.approx(9 / 19)
    assert r["mean_accepted_hi"] == pytest.approx(0.6)            # 9 / 15
    assert r["draft_rate"] == pytest.approx(1 / 3)                # 9 / 27
    # 2 arms x 32,065 steps at 25.333 steps/s: 64,130 x 0.75 / 19 = 2,531.447 s
    assert bp.seconds_to_verdict(32065, r["steps_per_s"]) == pytest.approx(2531.4473684)
    assert bp.seconds_to_verdict(32065, r["steps_per_s_lo"]) == pytest.approx(3206.5)


def test_engine_window_needs_every_document_in_flight():
    assert bp.request_window(REQS, concurrency=1) is None
    s = bp.engine_side(REQS, concurrency=1, label="x", wall_s=2.0)
    assert s.work_s == 2.0 and "wall" in s.work_how
    with pytest.raises(AtlasError, match="--engine-wall-s"):
        bp.engine_side(REQS, concurrency=1, label="x")


@pytest.mark.parametrize("bad", [R(0, 0, 3, 5, 3, 0.1),      # 3 tokens cannot hold 3 accepted + the first
                                 R(0, 0, 8, 1, 2, 0.1)])     # more accepted than drafted
def test_engine_counts_refused(bad):
    with pytest.raises(AtlasError, match="not the counts of one greedy turn"):
        bp.engine_steps(bad)


TIMINGS = {"import": 1.5, "model": 0.5, "compile": 0.25, "capture": 0.25, "waves": 2.5, "total": 5.0}


def test_ours_counts_and_rates():
    # 3 verify steps (k = 2) and one serial step (k = 0); two (doc, turn) units, each +1 prefill token
    s = bp.ours_side([2, 2, 2, 0], [2, 0, 1, 0], [3, 1, 2, 1], 2, TIMINGS, "ours", num_drafts=2, width=16)
    assert (s.committed, s.steps, s.steps_lo, s.drafted, s.accepted) == (9, 3, 3, 6, 3)
    assert s.work_s == pytest.approx(2.0)          # waves 2.5 - compile 0.25 - capture 0.25
    assert s.startup_s == pytest.approx(2.5)       # import 1.5 + model 0.5 + compile + capture 0.5
    assert s.wall_s == 5.0                         # the manifest's total, no --ours-wall-s
    r = bp.rates(s)
    assert (r["tokens_per_s"], r["steps_per_s"], r["mean_accepted"], r["draft_rate"]) == pytest.approx(
        (4.5, 1.5, 1.0, 0.5))
    assert bp.seconds_to_verdict(32065, r["steps_per_s"]) == pytest.approx(42753.333333)   # 64,130 / 1.5


def test_ours_says_when_its_caches_were_cold_and_carries_its_warm_up_as_its_build():
    cold = {**TIMINGS, "caches": {"TRITON_CACHE_DIR": {"files": 0}, "TORCHINDUCTOR_CACHE_DIR": {"files": 0}}}
    warm = {**TIMINGS, "caches": {"TRITON_CACHE_DIR": {"files": 154}, "TORCHINDUCTOR_CACHE_DIR": {"files": 0}}}
    s = bp.ours_side([2], [1], [2], 1, cold, "ours", build_s=12.5)
    assert "caches COLD" in s.work_how and s.build_s == 12.5 and s.work_s == pytest.approx(2.0)
    assert bp.ours_side([2], [1], [2], 1, warm, "ours").work_how == "waves less compile and capture"


def test_ours_refuses_waves_not_longer_than_their_compile():
    with pytest.raises(AtlasError, match="not longer than its compile"):
        bp.ours_side([2], [1], [2], 1, {**TIMINGS, "waves": 0.5}, "ours")


def test_budgeted_counts_as_the_server_does():
    # G = 8: g = 1 drafts min(2, 6) = 2, g = 4 drafts 2, g = 7 drafts min(2, 0) = 0 (one token left)
    assert bp.budgeted([[(2, 2, 3), (2, 2, 3), (2, 1, 1)]], 8) == (2, 4, 4)
    # G = 6: g = 1 drafts 2 (accepts 0), g = 2 drafts min(2, 3) = 2 (accepts 2), g = 5 drafts 0
    assert bp.budgeted([[(2, 0, 1), (2, 2, 3), (2, 0, 1)]], 6) == (2, 4, 2)


def test_study_size_from_the_prereg():
    z = bp.study_size("refeed_p2_uncond", p=0.4182, power=0.8, icc=None, m=None)
    # (3 + 0.841621)^2 x (0.4182 x 0.5818 + 0.4332 x 0.5668) / 0.015^2 = 14.758054 x 0.488847 / 0.000225
    # = 32,064.10 -> 32,065 steps per arm, above the registered 10,000
    assert (z.delta, z.threshold_sd, z.icc, z.n_power, z.min_n_per_arm, z.n_per_arm) == (
        0.015, 3.0, 0.0, 32065, 10000, 32065)
    # ICC 0.02 at 130 steps/document: deff 1 + 129 x 0.02 = 3.58; 32,064.10 x 3.58 = 114,789.5 -> 114,790
    assert bp.study_size("refeed_p2_uncond", 0.4182, 0.8, icc=0.02, m=130).n_per_arm == 114790
    with pytest.raises(AtlasError, match="give --icc"):
        bp.study_size("refeed_p2_uncond_cluster", 0.4182, 0.8, icc=None, m=None)


def engine_run(tmp_path: Path, reqs) -> Path:
    run = tmp_path / "engine"
    (run / "raw").mkdir(parents=True)
    raw = run / "raw" / "responses.jsonl"
    raw.write_text("".join(json.dumps({"doc_id": r.doc_id, "turn": r.turn, "seconds": r.seconds, "response": {
        "timings": {"predicted_n": r.predicted, "draft_n": r.drafted, "draft_n_accepted": r.accepted}}}) + "\n"
        for r in reqs))
    sha = hashlib.sha256(raw.read_bytes()).hexdigest()
    (run / "manifest.json").write_text(json.dumps({
        "status": "complete", "engine": {"name": "llamacpp"}, "collect": {"concurrency": 2},
        "workload": {"hash": "sha256:w"}, "source": {"files": [{"path": str(raw), "sha256": f"sha256:{sha}"}]}}))
    return run


def test_read_engine_checks_the_raw_file(tmp_path):
    run = engine_run(tmp_path, REQS)
    m, reqs = bp.read_engine(run)
    assert reqs == REQS and m["collect"]["concurrency"] == 2
    with open(run / "raw" / "responses.jsonl", "a") as f:
        f.write("\n")
    with pytest.raises(AtlasError, match="not the file its manifest lists"):
        bp.read_engine(run)


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    assert bp.main(["--engine", str(tmp_path / "none"), "--ours", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bench_peer.py: error:") and "manifest.json" in err[0]
    assert bp.main(["--engine", "a", "--ours", "b", "--engine-wall-s", "-1"]) == 2
    assert "--engine-wall-s -1.0: must be seconds > 0" in capsys.readouterr().err

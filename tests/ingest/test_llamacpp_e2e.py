"""One real engine end to end: llama.cpp's server, built by scripts/build_llamacpp.sh (outside the
repository), serves the shipped target with the shipped draft model (`--spec-type draft-simple`);
`collect --token-ids` drives it over a small slice of the default workload, our runner runs
`+arm=draft_model` over the same documents, and scripts/llamacpp_compare.py compares them request
by request (docs/ingest.md, "llama.cpp end to end"). Skipped where the build is absent.

    bash scripts/build_llamacpp.sh && python -m pytest -m llamacpp tests/ingest/test_llamacpp_e2e.py
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import llamacpp_compare

CURRENT = Path(os.environ.get("ATLAS_LLAMACPP_CACHE", Path.home() / ".cache/atlas_ab/llama.cpp")) / "current.json"
BUILT = json.loads(CURRENT.read_text()) if CURRENT.is_file() else {}

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow,
              pytest.mark.skipif(not (BUILT and all(Path(BUILT[k]).is_file()
                                                    for k in ("server", "target", "draft", "target_mtp"))),
                                 reason=f"llama.cpp not built ({CURRENT} absent): bash scripts/build_llamacpp.sh")]

K = 2
WORKLOAD = {"n_docs": 3, "turns": 3}     # 9 requests: turns >= 1 exercise the server's prompt cache
# A divergence is tolerated only where our top-1 led the top-2 by less than this (logits): the two
# fp32 paths (ggml's kernels, torch's) put that margin up to 0.0068 apart over 512 tokens, and the
# default workload's divergences were at 0.0015 and 0.0027 (docs/ingest.md).
NEAR_TIE = 0.01


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def llama_server(log: Path, *model_args: str, timeout: float = 120.0):
    """llama-server on a free loopback port; yields its /v1 URL; stopped (and reaped) on exit."""
    port = free_port()
    # one slot, one request at a time: two sequences decoded in one batch take other ggml kernels;
    # no polling: ggml's spinning threads beside a busy core cost several times the run
    cmd = [BUILT["server"], *model_args, "--host", "127.0.0.1", "--port", str(port), "--temp", "0",
           "--threads", "2", "--poll", "0", "--parallel", "1", "--ctx-size", "4096"]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"llama-server exited {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"llama-server not healthy after {timeout} s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(args: list[str], timeout: float) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                       check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def our_run(tmp: Path, arm: str, *extra: str) -> Path:
    out = tmp / f"ours_{arm}"
    run(["-m", "atlas_ab", f"+arm={arm}", f"arm.num_drafts={K}", *extra,
         *(f"workload.{k}={v}" for k, v in WORKLOAD.items()), f"hydra.run.dir={out}"], timeout=600)
    return out


def collected(tmp: Path, url: str, arm: str) -> Path:
    out = tmp / f"llamacpp_{arm}"
    run(["-m", "atlas_ab.collect", "--url", url, "--arm", arm, "--out", str(out), "--token-ids",
         "--ignore-eos", "--no-progress", "--timeout", "120", "--concurrency", "1",
         *(x for k, v in WORKLOAD.items() for x in ("--set", f"{k}={v}"))], timeout=600)
    return out


def test_draft_model_agrees_request_by_request(tmp_path):
    spec = ["--spec-type", "draft-simple", "--spec-draft-n-max", str(K), "--spec-draft-n-min", "0",
            "--spec-draft-p-min", "0"]
    with llama_server(tmp_path / "server.log", "-m", BUILT["target"], "-md", BUILT["draft"], *spec) as url:
        engine = collected(tmp_path, url, "draft_model")
    ours = our_run(tmp_path, "draft_model")
    c = llamacpp_compare.compare(ours, engine)
    t = c.totals
    print("\n".join(c.lines()))
    assert c.run_matches_reference and t["requests"] == 9
    # the same greedy tokens from the same weights, but at a near-tie ...
    assert all(d["margin"] < NEAR_TIE for d in t["divergences"]), c.lines()
    # ... and, where the tokens agree, the same drafts counted the same way
    same = [r for r in c.requests if r.same_context and r.same_completion]
    assert same and all(r.ours_budgeted == r.engine for r in same), c.lines()
    # ours counts K drafts at a turn's last steps, the server at most the tokens still to generate - 1
    assert sum(r.ours[0] for r in same) > sum(r.engine[0] for r in same)


def test_mtp_head_as_mimo2_same_tokens(tmp_path):
    """Our trunk + MTP layer written as MiMo-V2 (`--spec-type draft-mtp`) against our MTP arm whose rows
    are closest to llama.cpp's (every committed position's row, with the target's hidden: drafter_prefill,
    catchup, refeed). The trunk computes the same tokens; the counts are not held equal: llama.cpp's
    rows at position 0 and at each warm turn's checkpoint restore, and 6 of 121 requests unexplained,
    make them differ (docs/ingest.md, "MTP")."""
    spec = ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(K), "--spec-draft-n-min", "0",
            "--spec-draft-p-min", "0"]
    with llama_server(tmp_path / "server.log", "-m", BUILT["target_mtp"], *spec) as url:
        engine = collected(tmp_path, url, "mtp")
    ours = our_run(tmp_path, "prefill_refeed")
    c = llamacpp_compare.compare(ours, engine)
    t = c.totals
    print("\n".join(c.lines()))
    assert c.run_matches_reference and t["requests"] == 9
    assert all(d["margin"] < NEAR_TIE for d in t["divergences"]), c.lines()
    assert t["engine"]["drafted"] > 0 and 0 < t["engine"]["accepted"] <= t["engine"]["drafted"]

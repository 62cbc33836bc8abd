"""vLLM's real server in tests: its environment made once (scripts/setup_vllm.sh, idempotent) or the
test skipped with one line naming why it could not be, and a server started by our launcher
(`python -m atlas_ab.engines.vllm serve`) as a user starts it, stopped after."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import pytest

from atlas_ab import AtlasError

ROOT = Path(__file__).resolve().parents[2]
SERVE_TIMEOUT_S = 480       # the launcher's own wait for /health (43-130 s seen on 2 busy cores)
SETUP_TIMEOUT_S = 1200      # the engine's install: ~2-4 min on 2 cores from the registry; seconds once there


@lru_cache(maxsize=1)
def _setup() -> tuple[bool, str]:
    """Run the set-up once per test session: where ATLAS_VLLM_SETUP=0 it is not run (the venv is used
    if present)."""
    if os.environ.get("ATLAS_VLLM_SETUP", "1") == "0":
        return True, ""
    try:
        p = subprocess.run(["bash", str(ROOT / "scripts/setup_vllm.sh")], capture_output=True, text=True,
                           timeout=SETUP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"scripts/setup_vllm.sh did not finish in {SETUP_TIMEOUT_S} s"
    last = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or [""]
    return p.returncode == 0, last[0]


def engine_python() -> Path:
    """The interpreter of vLLM's environment, installed first if need be (scripts/setup_vllm.sh); where
    it cannot be installed the test is skipped, the one line naming why."""
    from atlas_ab.engines.vllm import server
    ok, why = _setup()
    if not ok:
        pytest.skip(f"vLLM cannot be installed here: {why}")
    try:
        return server.python()
    except AtlasError as e:
        pytest.skip(f"vLLM not installed: {e}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_module(*args: str, cwd, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python ARGS` (a `-m module` of ours, run as a user runs it) in `cwd`; exit != 0 fails the test unless
    check is False."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{args[:3]} exited {p.returncode}: {p.stderr[-2000:]}")
    return p


def launcher(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "atlas_ab.engines.vllm", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


@contextmanager
def served(*args: str):
    """`serve --port <free> --json ARGS`: yields the server's state (url, command, ...); stopped on exit.
    The launcher gives up (and stops vLLM) after SERVE_TIMEOUT_S, before this process's own limit."""
    engine_python()
    port = str(free_port())
    try:
        p = launcher("serve", "--port", port, "--json", "--timeout", str(SERVE_TIMEOUT_S), *args,
                     timeout=SERVE_TIMEOUT_S + 60)
        assert p.returncode == 0, f"serve exited {p.returncode}: {p.stderr.strip()[-2000:]}"
        yield json.loads(p.stdout)
    finally:
        launcher("stop", "--port", port, timeout=60)

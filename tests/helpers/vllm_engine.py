"""vLLM's real server for tests: its environment made once (scripts/setup_vllm.sh, idempotent), or
the test skipped with one line naming why it could not be."""
import socket
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP_TIMEOUT_S = 1200       # ~2-4 min on 2 cores from the registry; seconds once installed


@lru_cache(maxsize=1)
def _setup() -> tuple[bool, str]:
    try:
        p = subprocess.run(["bash", str(ROOT / "scripts/setup_vllm.sh")], capture_output=True, text=True,
                           timeout=SETUP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"scripts/setup_vllm.sh did not finish in {SETUP_TIMEOUT_S} s"
    last = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or [""]
    return p.returncode == 0, last[0]


def engine_python() -> Path:
    """The engine's interpreter; the test is skipped, naming why, where it cannot be installed."""
    from atlas_ab.engines.vllm import server
    ok, why = _setup()
    if not ok:
        pytest.skip(f"vLLM cannot be installed here: {why}")
    return server.python()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

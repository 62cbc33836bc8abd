"""`python -m atlas_ab` as a user runs it: a subprocess from the repo root, with this checkout first on
PYTHONPATH and Hydra's full tracebacks off (tests/run/test_cli.py, tests/run/test_faults.py)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def env_with(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("HYDRA_FULL_ERROR", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def cli(*args, cwd=None, env=None, wait=True):
    """(returncode, stdout, stderr), or the running process when wait=False."""
    p = subprocess.Popen([sys.executable, "-m", "atlas_ab", *args], cwd=cwd or ROOT, env=env or env_with(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        return p
    out, err = p.communicate(timeout=300)
    return p.returncode, out, err

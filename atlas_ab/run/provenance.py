"""Provenance for the manifest: git state, package versions, host, file hashes, time."""
from __future__ import annotations

import datetime as _dt
import hashlib
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Optional

from atlas_ab.config.paths import PACKAGE_ROOT

_PACKAGES = ("atlas_ab", "torch", "numpy", "pandas", "pyarrow", "hydra-core", "omegaconf",
             "safetensors", "tokenizers", "tqdm")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def git_info(root: Path = PACKAGE_ROOT) -> dict:
    """{"commit", "dirty"} of the checkout holding the package; nulls outside a git checkout.

    dirty = tracked files differ from HEAD (untracked files are ignored).
    """
    def git(*args: str) -> Optional[str]:
        try:
            r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        return r.stdout if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            mod = sys.modules.get(name.replace("-", "_"))
            out[name] = getattr(mod, "__version__", None)
    return out


def host() -> dict:
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "argv": list(sys.argv)}

"""Provenance for the manifest: the code that ran (a content hash, and the git commit of a clean
checkout of this project), package versions, host, file hashes (the time: atlas_ab/clock.py).

`python -m atlas_ab.run.provenance` prints the code identity as one JSON line (the GPU scripts
log it next to their runs)."""
from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Optional

from atlas_ab.config.paths import PACKAGE_DIR, PACKAGE_ROOT

_PACKAGES = ("atlas_ab", "torch", "numpy", "pandas", "pyarrow", "hydra-core", "omegaconf",
             "safetensors", "tokenizers", "tqdm")


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


#: What "the code that ran" is: the package's sources, its Hydra configs and its pre-registrations.
CODE_GLOBS = ("**/*.py", "conf/**/*.yaml", "prereg/*.yaml")
#: A file only this project's repository holds: its being tracked tells our checkout from a copy
#: of the tree inside some other repository.
_OWN_FILE = "atlas_ab/run/provenance.py"


def code_files(package: Path = PACKAGE_DIR) -> list[Path]:
    """The files the code hash covers, sorted by their path inside the package."""
    files = {f for g in CODE_GLOBS for f in package.glob(g) if f.is_file() and "__pycache__" not in f.parts}
    return sorted(files, key=lambda f: f.relative_to(package).as_posix())


def code_hash(package: Path = PACKAGE_DIR) -> tuple[str, int]:
    """(sha256 over every code file's package-relative path and bytes, number of files).

    Computed from the files themselves, so it names the code that ran wherever the tree came
    from (a wheel, a copy, a checkout with edits); path and length prefix each file's bytes so
    no two trees hash alike by shifting bytes between files."""
    h = hashlib.sha256()
    files = code_files(package)
    for f in files:
        data = f.read_bytes()
        h.update(f"{f.relative_to(package).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return "sha256:" + h.hexdigest(), len(files)


def _git(root: Path, *args: str) -> Optional[str]:
    try:
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def git_commit(root: Path = PACKAGE_ROOT) -> tuple[Optional[str], str]:
    """(the commit, "") when `root` is this project's own clean checkout, else (None, why not).

    Own checkout: git's toplevel is the package root AND it tracks a file only this project has
    (a copy of the tree inside another repository would otherwise name that repository's
    commit). Clean: nothing under atlas_ab/ differs from the commit, untracked files included
    (an untracked module runs as much as a tracked one)."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None:
        return None, "not a git checkout"
    if Path(top.strip()).resolve() != root.resolve():
        return None, f"the package sits inside another git repository ({top.strip()})"
    if _git(root, "ls-files", "--error-unmatch", _OWN_FILE) is None:
        return None, f"the git repository at {top.strip()} does not track {_OWN_FILE}: not this project's"
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", "atlas_ab")
    if status is None:
        return None, "git status failed"
    if status.strip():
        return None, f"uncommitted changes under atlas_ab/ ({len(status.splitlines())} file(s))"
    commit = _git(root, "rev-parse", "HEAD")
    return (commit.strip(), "") if commit else (None, "no commit yet")


def code_identity(root: Path = PACKAGE_ROOT) -> dict:
    """The manifest's `code`: {"hash", "files", "commit", "commit_why"} (commit null, and why,
    unless the tree is this project's own clean checkout)."""
    digest, n = code_hash(root / "atlas_ab")
    commit, why = git_commit(root)
    return {"hash": digest, "files": n, "commit": commit, "commit_why": why or None}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            mod = sys.modules.get(name.replace("-", "_"))
            out[name] = getattr(mod, "__version__", None)
    return out


#: when this process imported the module (its start, near enough): with the pid and the host it names the
#: process a run ran in, which a ladder's replicates must differ in (analysis/ladder/live.processes_of)
_STARTED = time.time()


def host() -> dict:
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "argv": list(sys.argv),
            "process": f"{socket.gethostname()}:{os.getpid()}:{_STARTED:.3f}"}


if __name__ == "__main__":
    import json

    print(json.dumps({"code": code_identity()}))

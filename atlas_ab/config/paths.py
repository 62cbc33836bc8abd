"""Where things are: the one package root and the one way a configured path is resolved.

A relative path in a config or on a command line (`model.path`, `study.prereg`,
`--prereg`) is looked up, in order:
  1. under the directory the command was launched from (Hydra does not chdir);
  2. under the package root: the directory holding `atlas_ab/` (the repo in a checkout);
  3. inside the installed package, for the repo paths that are links into it
     (`analysis/prereg/X` is `atlas_ab/prereg/X`, `conf/X` is `atlas_ab/conf/X`), so the
     README's commands work the same from a wheel as from a checkout.
A bare pre-registration name (`refeed_p2_uncond`) is the packaged one. When nothing exists
the package-root form is returned, so the error that follows names it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

#: The directory that holds the atlas_ab package (the repo root in a checkout).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = PACKAGE_ROOT / "atlas_ab"
PREREG_DIR = PACKAGE_DIR / "prereg"
CONF_DIR = PACKAGE_DIR / "conf"

#: Repo paths that are links into the package (kept in sync with the links in the repo).
_ALIASES = {"analysis/prereg": "atlas_ab/prereg", "conf": "atlas_ab/conf"}


def resolve_path(p: Optional[str | os.PathLike]) -> Optional[str]:
    """An absolute path for `p` (None and "" pass through); see the module docstring."""
    if p is None or p == "":
        return p
    pp = Path(os.path.expanduser(str(p)))
    if pp.is_absolute():
        return str(pp)
    candidates = [Path.cwd() / pp, PACKAGE_ROOT / pp]
    rel = pp.as_posix()
    for repo, pkg in _ALIASES.items():
        if rel == repo or rel.startswith(repo + "/"):
            candidates.append(PACKAGE_ROOT / (pkg + rel[len(repo):]))
    if len(pp.parts) == 1 and pp.suffix == "":
        candidates.append(PREREG_DIR / f"{rel}.yaml")
    for c in candidates:
        if c.exists():
            return str(c.resolve())
    return str((PACKAGE_ROOT / pp).resolve())

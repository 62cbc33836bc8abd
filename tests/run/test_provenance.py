"""The code that ran (issue 18 section 4): a content hash of the package's files, and the git
commit only where the tree is this project's own clean checkout."""
import json
import os
import subprocess
import sys

import pytest

from atlas_ab import AtlasError
from atlas_ab.config.paths import PACKAGE_ROOT
from atlas_ab.run.provenance import code_hash, code_identity, git_commit
from atlas_ab.run.session import run
from tests.run.test_store import BASE, cfg_of, manifest


def tree(root):
    """A package tree of the shape the hash covers: sources, a config, a pre-registration,
    and what it must not cover (bytecode, a README)."""
    pkg = root / "atlas_ab"
    for rel, text in {"__init__.py": "", "run/provenance.py": "x = 1\n", "conf/config.yaml": "a: 1\n",
                      "conf/arm/k1.yaml": "k: 1\n", "prereg/q.yaml": "name: q\n", "README.md": "words\n",
                      "run/__pycache__/provenance.cpython-311.pyc": "bytes"}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def git(root, *args):
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def test_the_hash_covers_sources_configs_and_preregs_only(tmp_path):
    pkg = tree(tmp_path)
    h, n = code_hash(pkg)
    assert n == 5 and h.startswith("sha256:")
    (pkg / "README.md").write_text("other words\n")
    (pkg / "run/__pycache__/provenance.cpython-311.pyc").write_text("other bytes")
    assert code_hash(pkg) == (h, 5)                            # not code
    for rel in ("run/provenance.py", "conf/arm/k1.yaml", "prereg/q.yaml"):
        before = (pkg / rel).read_text()
        (pkg / rel).write_text(before + " ")
        assert code_hash(pkg)[0] != h, rel
        (pkg / rel).write_text(before)
    assert code_hash(pkg) == (h, 5)
    (pkg / "run/new.py").write_text("")                        # an added (even empty) module is new code
    assert code_hash(pkg) == (code_hash(pkg)[0], 6) and code_hash(pkg)[0] != h
    (pkg / "run/new.py").unlink()
    (pkg / "run/provenance.py").rename(pkg / "run/provenance2.py")   # same bytes, another name
    assert code_hash(pkg)[0] != h


def test_the_commit_only_of_this_projects_own_clean_checkout(tmp_path):
    own = tmp_path / "own"
    tree(own)
    assert git_commit(own) == (None, "not a git checkout")
    git(own, "init", "-q")
    git(own, "add", "-A")
    git(own, "commit", "-qm", "c")
    head = subprocess.run(["git", "-C", str(own), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert git_commit(own) == (head, "")
    (own / "atlas_ab/conf/config.yaml").write_text("a: 2\n")
    commit, why = git_commit(own)
    assert commit is None and "uncommitted changes" in why
    git(own, "checkout", "--", ".")
    (own / "atlas_ab/extra.py").write_text("")                  # untracked code runs too
    assert git_commit(own)[0] is None
    (own / "atlas_ab/extra.py").unlink()
    assert git_commit(own) == (head, "")

    # a copy of the tree inside another repository: not that repository's commit (it was recorded
    # as `dirty: false` with a commit from outside this project's history)
    outer = tmp_path / "outer"
    tree(outer / "copy")
    git(outer, "init", "-q")
    git(outer, "add", "-A")
    git(outer, "commit", "-qm", "other project")
    commit, why = git_commit(outer / "copy")
    assert commit is None and "inside another git repository" in why
    # a repository rooted at the tree that does not track this project's files
    other = tmp_path / "other"
    tree(other)
    git(other, "init", "-q")
    (other / "notes.txt").write_text("x")
    git(other, "add", "notes.txt")
    git(other, "commit", "-qm", "not ours")
    commit, why = git_commit(other)
    assert commit is None and "does not track atlas_ab/run/provenance.py" in why


def test_the_module_prints_the_identity_of_this_tree():
    out = subprocess.run([sys.executable, "-m", "atlas_ab.run.provenance"], capture_output=True, text=True,
                         cwd=PACKAGE_ROOT, env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)})
    code = json.loads(out.stdout)["code"]
    assert code["hash"] == code_hash()[0] == code_identity()["hash"]


def test_a_resume_under_other_code_is_refused(tmp_path, monkeypatch):
    d = tmp_path / "r"
    monkeypatch.setenv("FAKE_RUNNER_CRASH_AT", "1")
    with pytest.raises(RuntimeError):
        run(cfg_of(*BASE, "+arm=baseline"), d)
    monkeypatch.delenv("FAKE_RUNNER_CRASH_AT")
    m = manifest(d)
    assert m["code"]["hash"] == code_hash()[0]
    m["code"]["hash"] = "sha256:" + "0" * 64            # as if the waves so far ran other code
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(AtlasError, match=r"code\.hash changed since the run started"):
        run(cfg_of(*BASE, "+arm=baseline", f"runner.resume={d}"), d)

"""atlas_ab/atomic.py: whole files or none, named on failure; and run/claim.py's directory lock."""
import errno
import hashlib
import os

import pytest

from atlas_ab import AtlasError, atomic
from atlas_ab.run import claim


def test_a_write_lands_whole_with_its_sha256_and_the_umask_permissions(tmp_path):
    p = tmp_path / "f.bin"
    old = os.umask(0o022)
    try:
        sha = atomic.write_bytes(p, b"abc")
    finally:
        os.umask(old)
    assert p.read_bytes() == b"abc" and sha == hashlib.sha256(b"abc").hexdigest() == atomic.sha256_file(p)
    assert p.stat().st_mode & 0o777 == 0o644
    assert os.listdir(tmp_path) == ["f.bin"]


def test_a_failed_write_leaves_the_old_file_and_no_tmp_and_names_the_destination(tmp_path, monkeypatch):
    p = tmp_path / "manifest.json"
    atomic.write_json(p, {"status": "running"})

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")     # as write() or fsync() raise it: no name
    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError) as e:
        atomic.write_json(p, {"status": "failed"})
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(p)
    assert os.listdir(tmp_path) == ["manifest.json"] and '"running"' in p.read_text()


def test_link_bytes_lets_the_first_writer_win(tmp_path):
    p = tmp_path / "prereg.yaml"
    assert atomic.link_bytes(p, b"first") is True
    assert atomic.link_bytes(p, b"second") is False
    assert p.read_bytes() == b"first" and os.listdir(tmp_path) == ["prereg.yaml"]


def test_the_run_lock_is_adopted_refuses_a_second_taker_and_goes_with_its_release(tmp_path):
    claim.park(tmp_path)                                 # Hydra's resolver, before it writes
    claim.park(tmp_path)                                 # resolved again: the same lock
    lock = claim.take(tmp_path)                          # the session adopts it
    assert (tmp_path / claim.LOCK).read_text() == f"pid {os.getpid()}\n"
    with pytest.raises(AtlasError, match=f"is in use by pid {os.getpid()}"):
        claim.take(tmp_path)                             # another session, even in this process
    lock.release()
    assert not (tmp_path / claim.LOCK).exists()
    claim.take(tmp_path).release()                       # free again


def test_configuration_names_the_hydra_subdir_and_only_the_run_side_takes_the_lock(tmp_path):
    from atlas_ab.config.hydra_schema import hydra_subdir

    assert hydra_subdir(None, str(tmp_path)) == ".hydra"
    assert not (tmp_path / claim.LOCK).exists()          # composing a config locks nothing
    (tmp_path / "manifest.json").write_text("{}")
    assert hydra_subdir(None, str(tmp_path)).startswith(".hydra/resume-")
    assert claim.claimed_hydra_subdir(None, str(tmp_path)) == hydra_subdir(None, str(tmp_path))
    assert (tmp_path / claim.LOCK).read_text() == f"pid {os.getpid()}\n"   # parked for the job
    claim.take(tmp_path).release()                       # the session adopts it and lets it go
    assert not (tmp_path / claim.LOCK).exists()

"""One process per run directory: an exclusive lock on `<run_dir>/.lock`, taken before anything
is written there and held until the run ends.

Hydra writes into a job's directory (its saved config, run.log) before our task starts, so a job
first takes the lock while Hydra resolves `hydra.output_subdir`, right after Hydra creates the
directory (the run's entry point registers `claimed_hydra_subdir` over configuration's pure
`atlas.hydra_subdir` resolver, so composing a config never takes a lock): a second process
started on the same directory is refused there, in one line, having written nothing, and the
session adopts the lock its own process already holds. A directory this process cannot write
(read-only, full, no permission) is refused at the same point. The lock file is removed on
release; a taker checks that the file it locked is still the one at the path (its previous
holder may have removed it meanwhile), so the removal never lets two processes in.
"""
from __future__ import annotations

import atexit
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Optional

from atlas_ab import AtlasError

LOCK = ".lock"


def check_writable(directory: Path) -> None:
    """Create `directory` if needed and write (and fsync) a byte there, or refuse in one line."""
    probe: Optional[str] = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".write-probe.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(b"\0")          # a byte, not an empty file: a full disk refuses it
            f.flush()
            os.fsync(f.fileno())
    except OSError as ex:
        raise AtlasError(f"run directory {directory} is not writable: {ex.strerror or ex}") from None
    finally:
        if probe is not None and os.path.exists(probe):
            os.unlink(probe)


class DirLock:
    """The lock of one run directory, held by this process (see the module docstring)."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.fd: Optional[int] = None
        self.parked = False          # taken for a Hydra job, not yet adopted by its session

    @property
    def path(self) -> Path:
        return self.dir / LOCK

    def acquire(self) -> "DirLock":
        while True:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise AtlasError(f"{self.dir} is in use by {self._holder()}: a run directory is written by one "
                                 "process at a time (wait for it, or stop it first)") from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)             # its holder removed it as we locked it: lock the file there now
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}\n".encode())
        self.fd = fd
        return self

    def _holder(self) -> str:
        try:
            return self.path.read_text().strip() or "another process"
        except OSError:
            return "another process"

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            if os.stat(self.path).st_ino == os.fstat(self.fd).st_ino:
                os.unlink(self.path)     # while still holding it: a waiter re-checks the inode
        except OSError:
            pass
        os.close(self.fd)                # closing drops the flock
        self.fd = None
        _held.pop(_key(self.dir), None)


#: the locks this process holds, by resolved directory
_held: dict[Path, DirLock] = {}


def _key(directory: Path) -> Path:
    return Path(directory).resolve()


def park(directory: Path) -> None:
    """Lock a Hydra job's directory before Hydra writes into it; the job's session adopts the lock
    (`take`). Idempotent: Hydra resolves the output subdir more than once."""
    if _key(directory) in _held:
        return
    check_writable(Path(directory))
    lock = DirLock(directory).acquire()
    lock.parked = True
    _held[_key(directory)] = lock


def take(directory: Path) -> DirLock:
    """The lock of a session's run directory: the one this process parked for the job, else a new
    one. Another holder, another process or another session of this one, is refused in one line."""
    held = _held.get(_key(directory))
    if held is not None and held.parked:
        held.parked = False
        return held
    check_writable(Path(directory))
    lock = DirLock(directory).acquire()
    _held[_key(directory)] = lock
    return lock


def claimed_hydra_subdir(resume: Optional[str], output_dir: str) -> str:
    """`atlas.hydra_subdir` for a job: park the directory's lock, then name the subdir as
    configuration does. Hydra resolves it after creating the directory and before writing into
    it, so a directory another process is writing, or one nobody can write, is refused here."""
    from atlas_ab.config.hydra_schema import hydra_subdir

    if output_dir and Path(output_dir).is_dir():
        park(Path(output_dir))
    return hydra_subdir(resume, output_dir)


def register_resolver() -> None:
    """Make every job of this process take its directory's lock as Hydra resolves its subdir."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("atlas.hydra_subdir", claimed_hydra_subdir, replace=True)


@atexit.register
def _release_all() -> None:
    """A lock parked for a job that never started (Hydra failed before our task) goes at exit."""
    for lock in list(_held.values()):
        lock.release()

"""The trajectory cache of replay mode: one directory per (model, tokenizer, workload, dtype, device).

```
<root>/<key>/meta.json                 what the key stands for, per-wave file hashes, the build's time
<root>/<key>/wave-NNNNN.safetensors    wave NNNNN's arrays (trajectory.Trajectory.tensors)
<root>/<key>.lock                      held while one job builds; the others wait on it, then read
```

The key hashes everything the stored numbers depend on: the checkpoint's hash, the
tokenizer's, the workload's (its documents' tokens), the dtype, the device (a CPU fp32 and
a GPU bf16 trajectory differ), torch's version, the waves' documents (a batch's shapes move
low bits), G and the continuation length. Nothing half-written is read: a build writes
into `.<key>.tmp-<pid>/` and renames the whole directory into place when every wave and
`meta.json` are on disk, all under an exclusive `flock` of `<key>.lock`; a job that finds
the lock held waits for it (the builder's debris, if it died, is removed by the next one).
Each wave file's sha256 is checked when it is read.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from safetensors.torch import load as st_load, save as st_save

from atlas_ab import AtlasError
from atlas_ab.atomic import write_bytes, write_json
from atlas_ab.clock import now
from atlas_ab.speculative.trajectory import Trajectory

log = logging.getLogger("atlas_ab")

#: Version of the stored layout (part of the key: a new layout never reads an old one).
FORMAT = 1


def wave_file(i: int) -> str:
    return f"wave-{i:05d}.safetensors"


def key_of(fields: dict) -> str:
    blob = json.dumps({"format": FORMAT, **fields}, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


class TrajectoryStore:
    def __init__(self, root: str | Path, fields: dict):
        self.root = Path(root)
        self.fields = {"format": FORMAT, **fields}
        self.key = key_of(fields)
        self.dir = self.root / self.key
        self.meta: dict | None = None

    def ensure(self, n_waves: int, build: Callable[[int], Trajectory]) -> dict:
        """Build the trajectory unless it is stored (waiting for a job that is building it);
        returns what the run's manifest records about it."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / f"{self.key}.lock", os.O_CREAT | os.O_RDWR)
        except OSError as ex:
            raise AtlasError(f"trajectory cache {self.root} is not writable: {ex.strerror or ex}") from None
        t0 = time.perf_counter()
        built, build_s = False, None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                log.info("trajectory %s: another job is building it; waiting", self.key)
                fcntl.flock(fd, fcntl.LOCK_EX)
            waited = time.perf_counter() - t0
            if not (self.dir / "meta.json").exists():
                t1 = time.perf_counter()
                self._build(n_waves, build)
                built, build_s = True, time.perf_counter() - t1
            self.meta = self._read_meta()
        finally:
            os.close(fd)          # drops the flock
        if len(self.meta["waves"]) != n_waves:
            raise AtlasError(f"trajectory {self.dir} holds {len(self.meta['waves'])} waves, the run has {n_waves}")
        return {"key": self.key, "path": str(self.dir.resolve()), "hash": self.meta["hash"],
                "built": built, "build_s": None if build_s is None else round(build_s, 3),
                "waited_s": round(waited, 3), "built_at": self.meta["built_at"],
                "bytes": self.meta["bytes"], "bytes_per_position": self.meta["bytes_per_position"],
                "extend": self.meta["extend"]}

    def _build(self, n_waves: int, build: Callable[[int], Trajectory]) -> None:
        for debris in self.root.glob(f".{self.key}.tmp-*"):     # a builder that died under the lock
            shutil.rmtree(debris, ignore_errors=True)
        tmp = self.root / f".{self.key}.tmp-{os.getpid()}"
        tmp.mkdir()
        t0 = time.perf_counter()
        waves, total, bpp, extend = [], 0, None, None
        try:
            for i in range(n_waves):
                traj = build(i)
                data = st_save(traj.tensors())
                write_bytes(tmp / wave_file(i), data)
                waves.append({"file": wave_file(i), "sha256": hashlib.sha256(data).hexdigest(),
                              "bytes": len(data), "docs": traj.doc_ids.tolist(),
                              "positions": int((traj.tokens >= 0).sum())})
                total += len(data)
                bpp, extend = traj.bytes_per_position, int(traj.ext.shape[-1])
            whole = hashlib.sha256("".join(w["sha256"] for w in waves).encode()).hexdigest()
            write_json(tmp / "meta.json", {
                "key": self.key, "fields": self.fields, "hash": "sha256:" + whole, "waves": waves, "bytes": total,
                "bytes_per_position": bpp, "extend": extend, "build_s": round(time.perf_counter() - t0, 3),
                "built_at": now(), "built_by": {"pid": os.getpid(), "host": os.uname().nodename}})
            os.rename(tmp, self.dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        dfd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _read_meta(self) -> dict:
        try:
            meta = json.loads((self.dir / "meta.json").read_text())
        except (OSError, ValueError) as ex:
            raise AtlasError(f"trajectory {self.dir}: unreadable meta.json ({ex})") from None
        stored = meta.get("fields") or {}
        for k, v in self.fields.items():
            if json.dumps(stored.get(k), sort_keys=True, default=str) != json.dumps(v, sort_keys=True, default=str):
                raise AtlasError(f"trajectory {self.dir}: stored for {k}={stored.get(k)!r}, this run has {v!r}")
        return meta

    def load(self, i: int) -> Trajectory:
        """Wave i's trajectory (CPU tensors), checked against its recorded sha256."""
        if self.meta is None:
            self.meta = self._read_meta()
        w = self.meta["waves"][i]
        path = self.dir / w["file"]
        try:
            data = path.read_bytes()
        except OSError as ex:
            raise AtlasError(f"trajectory {path}: {ex.strerror or ex}") from None
        if hashlib.sha256(data).hexdigest() != w["sha256"]:
            raise AtlasError(f"trajectory {path}: its sha256 is not the one recorded when it was built "
                             "(delete the directory to rebuild it)")
        return Trajectory.from_tensors(st_load(data))

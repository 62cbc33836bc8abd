"""The run store: one directory per run, laid out as docs/telemetry.md says.

```
<run_dir>/manifest.json            status running|failed|complete|stopped, provenance, complete shards
<run_dir>/steps/part-NNNNN.parquet shard NNNNN = wave NNNNN of the runner (batch_width documents)
<run_dir>/events/part-NNNNN.parquet  (only when the arm has fingerprints on)
<run_dir>/.hydra/, run.log         written by Hydra
```

Nothing half-written looks like data: every file lands whole (`atlas_ab.atomic`: a temporary
file, fsync'd, renamed into place), a shard before the manifest that lists it, with its row
count and sha256 (which the analysis checks at load). A crash between the rename and the
manifest leaves an unlisted file that readers ignore and a resume overwrites. A run that stops
early says `running` (killed) or `failed`, or `stopped` when its sequential study decided before
its last wave (final, like `complete`; `stopped` in the manifest says by which study and look).

Resume = the runner is deterministic and shard i is exactly wave i, so a resumed run recomputes
only the waves the manifest does not list, or lists with a file that is missing or no longer
matches its sha256 (a `complete` run included).

One process at a time: the run directory's lock (`claim.py`) is held from before the manifest is
read until the session ends, so a second run or resume of the same directory is refused in one
line instead of racing the first. A failed write (disk full) removes the run's `*.tmp` debris,
gives back the space the store reserved when the run began (`.reserve`) so that the manifest can
still say `failed` with the error, and a later resume completes the run.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from atlas_ab import AtlasError, atomic
from atlas_ab.clock import now
from atlas_ab.run import claim
from atlas_ab.speculative.gate_status import status_of
from atlas_ab.telemetry.schema import MANIFEST_SCHEMA as SCHEMA, SHARD_ROWS

MANIFEST = "manifest.json"
#: space held while a run writes, given back when a write fails so the `failed` manifest fits
RESERVE, RESERVE_BYTES = ".reserve", 1 << 20

#: Config keys that may differ between an interrupted run and its resumption.
RESUME_IGNORED = (("runner", "progress"), ("runner", "resume"), ("runner", "write_behind"),
                  ("runner", "compile_cache"))


def shard_name(i: int) -> str:
    return f"part-{i:05d}.parquet"


def aggregate_gate(gates: Iterable[Optional[dict]]) -> dict:
    """The lossless gate over shards: counts summed; failed if any shard failed, passed only
    if some shard checked a sequence and none failed, else `not run`. `by` says how it was
    checked: `live` (a teacher-forced target-only check), `replay` (replay mode committed the stored
    target-only trajectory), or both joined with `+`."""
    out = {"checked_sequences": 0, "checked_tokens": 0, "divergences": 0, "near_ties": 0, "arbitrated": 0,
           "passed": None, "margins": [], "arbitrations": [], "first_divergence": None, "near_tie_bound": None}
    failed = False
    by = set()
    for g in gates:
        if not g:
            continue
        by.update(str(g.get("by") or "live").split("+"))
        for key in ("checked_sequences", "checked_tokens", "divergences", "near_ties", "arbitrated"):
            out[key] += int(g.get(key, 0) or 0)
        ks = g.get("ks")                 # a sampled run's distributional gate (speculative/pit_gate.py)
        if ks is not None:
            out.setdefault("ks", []).extend(ks if isinstance(ks, list) else [ks])
        out["margins"] += list(g.get("margins") or [])
        out["arbitrations"] += list(g.get("arbitrations") or [])
        if out["near_tie_bound"] is None:      # the run's one bound (speculative/precision.py), on each shard
            out["near_tie_bound"] = g.get("near_tie_bound")
        # the first divergence of the first failed shard (the one the run fails on), else the first
        if g.get("first_divergence") is not None and (out["first_divergence"] is None
                                                      or (g.get("passed") is False and not failed)):
            out["first_divergence"] = g["first_divergence"]
        failed |= g.get("passed") is False
    if failed:
        out["passed"] = False
    elif out["checked_sequences"]:
        out["passed"] = True
    out["status"] = status_of(out["passed"], out["checked_sequences"])
    out["by"] = "+".join(sorted(by)) or None
    return out


def config_diff(old: dict, new: dict, ignored=RESUME_IGNORED, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two resolved configs (ignoring `ignored`)."""
    diffs = []
    for key in sorted(set(old) | set(new), key=str):
        path = f"{prefix}{key}"
        if any(path == ".".join(ig) for ig in ignored):
            continue
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += config_diff(a, b, ignored, path + ".")
        elif a != b:
            diffs.append(f"{path}: {a!r} -> {b!r}")
    return diffs


class RunStore:
    """Writes one run directory. `lock()`, then `start()` (fresh) or `resume()`, then `add_shard()`s,
    then `finish()` (or `fail()`), then `unlock()`."""

    def __init__(self, run_dir: str | Path):
        self.dir = Path(run_dir)
        self.manifest: dict = {}
        self.rebuilt: list[int] = []       # waves a resume found missing or altered
        self._lock: Optional[claim.DirLock] = None

    # -- one process at a time -------------------------------------------
    def lock(self) -> None:
        """Take the run directory's lock, or refuse in one line if another process holds it."""
        self._lock = claim.take(self.dir)

    @property
    def locked(self) -> bool:
        return self._lock is not None

    def unlock(self) -> None:
        self._free_reserve()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def remove_debris(self) -> list[Path]:
        """Delete the `*.tmp` files a failed write left (they are never data)."""
        gone = []
        for p in [*self.dir.glob("*.tmp"), *self.dir.glob("*/*.tmp")]:
            try:
                p.unlink()
                gone.append(p)
            except OSError:
                pass
        return gone

    def _reserve(self) -> None:
        try:
            with open(self.dir / RESERVE, "wb") as f:
                f.write(bytes(RESERVE_BYTES))
                f.flush()
                os.fsync(f.fileno())
        except OSError as ex:
            self._free_reserve()
            raise AtlasError(f"run directory {self.dir} is not writable: {ex.strerror or ex}") from None

    def _free_reserve(self) -> None:
        try:
            (self.dir / RESERVE).unlink()
        except OSError:
            pass

    # -- reading ---------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    def read_manifest(self) -> Optional[dict]:
        p = self.manifest_path
        if not p.exists():
            return None
        try:
            return json.loads(p.read_text())
        except (OSError, ValueError) as ex:
            raise AtlasError(f"{p}: unreadable manifest ({ex})") from None

    def done_waves(self) -> set[int]:
        return {int(s["wave"]) for s in self.manifest.get("shards", [])}

    def intact(self, shard: dict) -> bool:
        """Every file the shard entry lists is there, with its recorded sha256 (when it has one)."""
        sha = shard.get("sha256") or {}
        for table in SHARD_ROWS:
            rel = shard.get(table)
            if not rel:
                continue
            path = self.dir / rel
            if not path.is_file():
                return False
            if table in sha and atomic.sha256_file(path) != sha[table]:
                return False
        return True

    # -- writing ---------------------------------------------------------
    def save(self) -> None:
        try:
            atomic.write_json(self.manifest_path, self.manifest)
        except OSError as ex:
            raise AtlasError(f"cannot write {self.manifest_path}: {ex.strerror or ex}") from None

    def start(self, base: dict) -> dict:
        """A fresh run: refuses a directory that already holds one."""
        claim.check_writable(self.dir)
        if self.manifest_path.exists():
            raise AtlasError(f"{self.dir} already holds a run; continue it with runner.resume={self.dir} "
                             "or choose another hydra.run.dir")
        self._reserve()
        self.manifest = {"schema": SCHEMA, "status": "running", **base,
                         "shards": [], "rows": {"steps": 0, "events": 0},
                         "gate": aggregate_gate([]), "started": now(), "finished": None,
                         "resumed": False, "resumes": []}
        self.save()
        return self.manifest

    def check_resumable(self, config: dict) -> dict:
        """The manifest of the run to resume, refused in one line if its config differs from
        `config` (but RESUME_IGNORED): checked before any model loads."""
        old = self.read_manifest()
        if old is None:
            raise AtlasError(f"cannot resume {self.dir}: no manifest.json (not a run directory)")
        diffs = config_diff(old.get("config") or {}, config)
        if diffs:
            more = f" (+{len(diffs) - 3} more)" if len(diffs) > 3 else ""
            raise AtlasError(f"cannot resume {self.dir}: config differs from the saved run: "
                             + "; ".join(diffs[:3]) + more)
        return old

    def resume(self, config: dict, info_check: dict, preregs: Optional[list] = None) -> dict:
        """Continue the run in this directory: its config must equal `config` (but RESUME_IGNORED).

        `info_check` maps manifest keys to the values this invocation computed
        (model/workload hashes, ...): a changed checkpoint or corpus is refused too, and so
        is a locked pre-registration whose hash is not the one the run started under.
        A shard whose file is missing or no longer matches its sha256 is dropped and its wave
        recomputed (`rebuilt`), in a `complete` run too.
        """
        claim.check_writable(self.dir)
        old = self.check_resumable(config)
        for key, value in info_check.items():
            was = old
            for part in key.split("."):
                was = was.get(part) if isinstance(was, dict) else None
            if was != value:
                raise AtlasError(f"cannot resume {self.dir}: {key} changed since the run started "
                                 f"({was!r} -> {value!r})")
        had = {e.get("path"): e.get("sha256") for e in old.get("preregs") or []}
        for e in preregs or []:
            if e["path"] in had and had[e["path"]] != e["sha256"]:
                raise AtlasError(f"cannot resume {self.dir}: pre-registration {e['path']} is locked at "
                                 f"{had[e['path']][:12]} for this run, now {e['sha256'][:12]}")
        shards = [s for s in old.get("shards", []) if self.intact(s)]
        self.rebuilt = sorted(int(s["wave"]) for s in old.get("shards", []) if s not in shards)
        prior = old.get("status")
        self.manifest = old
        self.manifest["shards"] = sorted(shards, key=lambda s: s["wave"])
        self._recount()
        if prior != "complete" or self.rebuilt:
            self.remove_debris()
            self.manifest["status"] = "running"
            self.manifest["resumed"] = True
            self.manifest["finished"] = None
            self.manifest.pop("error", None)
            self.manifest.pop("stopped", None)     # a stopped run resumed runs on to its last wave
            self.manifest.setdefault("resumes", []).append(
                {"at": now(), "from_status": prior, "shards_kept": len(shards), "rebuilt": self.rebuilt})
            self._reserve()
            self.save()
        return self.manifest

    def _recount(self) -> None:
        shards = self.manifest["shards"]
        self.manifest["rows"] = {"steps": sum(int(s["rows"]) for s in shards),
                                 "events": sum(int(s.get("event_rows") or 0) for s in shards)}
        self.manifest["gate"] = aggregate_gate(s.get("gate") for s in shards)
        checks = [s["replay_check"] for s in shards if s.get("replay_check")]
        if checks or "replay_check" in self.manifest:
            from atlas_ab.speculative.replay_check import aggregate
            self.manifest["replay_check"] = aggregate(checks)

    def add_shard(self, wave: int, docs: list[int], steps: pa.Table, events: Optional[pa.Table],
                  gate: Optional[dict], n_tokens: int, seconds: float, replay_check: Optional[dict] = None) -> dict:
        """Write wave `wave`'s tables atomically, then list them in the manifest with their row
        counts and sha256s (and, in replay mode, how the wave's live run differed: `replay_check`)."""
        if wave in self.done_waves():
            raise AtlasError(f"{self.dir}: wave {wave} is already stored")
        name = shard_name(wave)
        sha = {}
        try:
            ev_rel = None
            if events is not None:
                (self.dir / "events").mkdir(exist_ok=True)
                ev_rel = f"events/{name}"
                sha["events"] = atomic.write_table(self.dir / ev_rel, events)
            (self.dir / "steps").mkdir(exist_ok=True)
            st_rel = f"steps/{name}"
            sha["steps"] = atomic.write_table(self.dir / st_rel, steps)
        except OSError as ex:
            self.remove_debris()
            raise AtlasError(f"cannot write {ex.filename or self.dir / 'steps' / name}: {ex.strerror or ex}") from None
        entry = {"wave": wave, "steps": st_rel, "events": ev_rel, "rows": steps.num_rows,
                 "event_rows": 0 if events is None else events.num_rows, "sha256": sha,
                 "docs": [int(d) for d in docs], "tokens": int(n_tokens), "seconds": round(float(seconds), 3),
                 "gate": gate}
        if replay_check is not None:
            entry["replay_check"] = replay_check
        self.manifest["shards"] = sorted(self.manifest["shards"] + [entry], key=lambda s: s["wave"])
        self._recount()
        self.save()
        return entry

    def finish(self, status: str, error: Optional[str] = None, **extra: Any) -> dict:
        self.manifest["status"] = status
        self.manifest["finished"] = now()
        if error is not None:
            self.manifest["error"] = error
        self.manifest.update(extra)
        self.save()
        return self.manifest

    def fail(self, error: str) -> dict:
        """Mark the run `failed` with `error`: first remove the `*.tmp` debris and give back the
        reserved space, since a full disk is the usual reason a write failed."""
        self.remove_debris()
        self._free_reserve()
        return self.finish("failed", error=error)

    def shard_paths(self) -> list[Path]:
        return [self.dir / s["steps"] for s in self.manifest.get("shards", [])]

    def read_steps(self) -> pa.Table:
        tables = [pq.read_table(p) for p in self.shard_paths()]
        return pa.concat_tables(tables) if tables else pa.table({})


def write_failed_manifest(run_dir: str | Path, base: dict, error: str) -> None:
    """Mark a directory that holds no run yet (Hydra created it for this job) as a failed run.

    Best effort, never raises; a directory that already has a manifest is left alone (it
    belongs to another run). The caller holds the directory's lock.
    """
    try:
        store = RunStore(run_dir)
        if store.manifest_path.exists() or not store.dir.is_dir():
            return
        store.manifest = {"schema": SCHEMA, "status": "failed", **base, "shards": [],
                          "rows": {"steps": 0, "events": 0}, "started": now(), "finished": now(),
                          "resumed": False, "error": error}
        store.save()
    except Exception:  # noqa: BLE001 -- the directory may be the thing that is broken
        pass

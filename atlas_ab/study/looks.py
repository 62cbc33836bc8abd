"""When a sequential study looks, and what it has seen at a look (pure: no run, no statistics).

Terms:
  wave        `runner.batch_width` documents, the unit a run stores and resumes by; every arm of a
              sequential study runs the same waves in the same order (run/runner.py).
  look        a judgement of a sequential registration after a wave: every `look_every` waves
              (look_unit wave), or at the end of the wave that completes the next `look_every`
              clusters (look_unit cluster); the budget's last wave is always a look.
  seen        the documents of the clusters whose every document is in the waves run so far: a
              cluster cut across two waves is judged once it is whole, so a look's clusters never
              change later and each look extends the one before (the confidence sequence's order).
  budget      the waves a registration may run: `max_waves`, the workload's waves, and the wave at
              which `max_clusters` clusters are whole, whichever comes first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from atlas_ab import AtlasError


@dataclass(frozen=True)
class Plan:
    """One registration's looks over a workload's waves."""
    name: str
    look_every: int
    look_unit: str              # wave | cluster
    budget_waves: int           # the last wave (count) it may run
    max_clusters: Optional[int]

    def is_look(self, waves_run: int, whole_now: int, whole_before: int) -> bool:
        """Is the end of wave `waves_run` (a count) a look? whole_now / whole_before: whole clusters
        after this wave and after the previous look."""
        if self.is_last(waves_run, whole_now):
            return True
        if self.look_unit == "wave":
            return waves_run % self.look_every == 0
        return whole_now - whole_before >= self.look_every

    def is_last(self, waves_run: int, whole_now: int) -> bool:
        """The budget ends at this wave."""
        return waves_run >= self.budget_waves or (self.max_clusters is not None and whole_now >= self.max_clusters)


def plan_of(name: str, seq, n_waves: int) -> Plan:
    """The looks of a registration's `sequential:` block (config/prereg.py `Sequential`) over `n_waves` waves."""
    unit = getattr(seq.look_unit, "value", seq.look_unit)
    budget = n_waves if seq.max_waves is None else min(n_waves, int(seq.max_waves))
    return Plan(name, int(seq.look_every), str(unit), budget, seq.max_clusters)


def check_schedule(name: str, seq, batch_width: int) -> None:
    """A look schedule finer than a wave is refused before any model loads: a wave holds at most
    `batch_width` clusters (one per document), so a look every fewer clusters may fall inside one."""
    try:
        seq.check_wave(batch_width, 1.0)
    except AtlasError as e:
        raise AtlasError(f"pre-registration {name}: {e}") from None


def whole_clusters(waves: Sequence[Sequence[int]], waves_run: int, doc_cluster: Optional[Sequence[int]]) \
        -> tuple[list[int], int]:
    """(documents of the whole clusters, how many clusters) after the first `waves_run` waves;
    `doc_cluster`: doc_id -> cluster (None: every document is its own cluster)."""
    done = [d for w in waves[:waves_run] for d in w]
    if doc_cluster is None:
        return sorted(done), len(done)
    seen = set(done)
    members: dict[int, list[int]] = {}
    for doc in (d for w in waves for d in w):
        members.setdefault(int(doc_cluster[doc]), []).append(doc)
    whole = [g for g, docs in members.items() if all(d in seen for d in docs)]
    return sorted(d for g in whole for d in members[g]), len(whole)

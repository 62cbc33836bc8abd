"""The report's view of a sequential registration: its path over the looks, the look that decided,
and the steps it did not need (sequential/judge.py judges; study/sequential.py ran the looks).

Terms:
  record   what the study that ran the arms wrote in each arm's manifest (`sequential.preregs`):
           the clusters at each look, the waves and documents seen, the wave it stopped at and
           its saving. The report re-judges the stored runs at exactly those looks; runs no
           sequential study drove are judged after every cluster, with the budget taken as ended.
  saving   the step rows each arm ran up to the stop against the registration's `min_n_per_arm`
           (a sequential registration keeps its fixed-n question's minimum), and the waves not run.
"""
from __future__ import annotations

from dataclasses import dataclass

from atlas_ab.analysis.sequential.judge import SequentialResult, decisive_look, judge_sequential, saving_words
from atlas_ab.config.prereg import Prereg


@dataclass(frozen=True)
class SequentialView:
    result: SequentialResult
    record: dict | None          # the study's record (None: no study drove these runs)
    looks: list[dict]            # the result's looks, with the waves and documents the record saw

    @property
    def agrees(self) -> bool:
        """The stored data give the decision the study recorded (always, unless the data changed)."""
        return self.record is None or self.record.get("decision") == self.result.decision

    def lines(self) -> list[str]:
        r, n = self.result, len(self.looks)
        lk = decisive_look(self.looks, r.decided_at)
        seen = f"{lk['documents']} documents ({lk['waves']} waves)" if lk.get("waves") else \
            f"{lk['n_clusters']} {r.cluster_unit}s"
        out = [f"- sequential decision: **{r.decision}** at look {lk['index']} of {n}, after {seen}: "
               f"estimate {lk['estimate']:+.4f}, {1 - r.alpha:.0%} confidence sequence [{lk['lower']:+.4f}, "
               f"{lk['upper']:+.4f}] (pooled {lk['pooled']:+.4f}; estimand: cluster mean of "
               f"{r.estimand.replace('_', ' ')}, clusters: {r.cluster_unit}s)"]
        sv = (self.record or {}).get("saving")
        if sv:
            out.append(f"- {saving_words(sv)}")
        elif self.record is None:
            out.append("- no sequential study drove these runs: judged after every cluster, the budget taken as "
                       "ended")
        if not self.agrees:
            out.append(f"- **WARNING: the study recorded {self.record.get('decision')}; the stored runs give "
                       f"{r.decision}**")
        return out

    def summary(self) -> str:
        return self.result.summary() + ("" if self.agrees else
                                        f" (WARNING: the study recorded {self.record.get('decision')})")

    def to_dict(self) -> dict:
        return {**self.result.to_dict(), "looks": self.looks, "record": self.record, "agrees": self.agrees}


def record_of(pr: Prereg, runs) -> dict | None:
    """The study's record of `pr` in the manifest of the first of its arms that has one."""
    for r in runs:
        if r.arm in pr.arms:
            rec = (((r.manifest or {}).get("sequential") or {}).get("preregs") or {}).get(pr.name)
            if rec and rec.get("sha256") == pr.sha256:
                return rec
    return None


def view(pr: Prereg, runs) -> SequentialView:
    """`pr` judged sequentially on the runs, at the looks its study made."""
    rec = record_of(pr, runs)
    mine = [r for r in runs if r.arm in pr.arms]
    if rec and rec.get("looks"):
        counts = [lk["n_clusters"] for lk in rec["looks"]]
        res = judge_sequential(pr, mine, looks=counts, final=bool(rec.get("final")))
        looks = [{**lk.to_dict(), **{k: old.get(k) for k in ("waves", "documents")}}
                 for lk, old in zip(res.looks, rec["looks"])]
    else:
        res = judge_sequential(pr, mine, final=True)
        looks = [lk.to_dict() for lk in res.looks]
    return SequentialView(res, rec, looks)



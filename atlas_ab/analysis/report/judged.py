"""The pre-registrations a report judges, and how: a verdict where the runs locked the text (or the
user asked), none otherwise, and the line the report opens with when it is not the pre-registered one."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.analysis import criteria
from atlas_ab.analysis.criteria import Judgement, Verdict
from atlas_ab.analysis.runs import AnyRun
from atlas_ab.config.prereg import Prereg, Registration, registrations


@dataclass(frozen=True)
class Judged:
    """One pre-registration as this report judged it."""
    prereg: Prereg
    origin: str                      # locked | unlocked | changed (no verdict) | edited | evaluated unlocked
    judgement: Judgement
    locked_sha256: str | None = None
    why: str = ""                    # unlocked: which arms did not lock it
    sequential: object = None        # a sequential registration: its path (sequential.SequentialView)

    @property
    def verdict(self) -> Verdict:
        return self.judgement.verdict

    @property
    def locked(self) -> bool:
        return self.origin == "locked"

    def warning(self) -> str | None:
        """The line the report opens with when this verdict is not the pre-registered one."""
        name = f"`{self.prereg.path.name}` (sha256 `{self.prereg.sha256}`)"
        if self.origin == "edited":
            return (f"**WARNING: JUDGED AGAINST AN EDITED PRE-REGISTRATION.** `{self.prereg.path.name}` was locked at "
                    f"sha256 `{self.locked_sha256}` when the study began; this report evaluated the edited text "
                    f"(sha256 `{self.prereg.sha256}`) at the user's request (--evaluate-edited). Its verdict is not "
                    "the pre-registered one.")
        if self.origin == "evaluated unlocked":
            return (f"**WARNING: UNLOCKED PRE-REGISTRATION, JUDGED AT THE USER'S REQUEST.** {name}: {self.why}. "
                    "Its verdict is not a pre-registered one (--evaluate-unlocked).")
        if self.origin == "unlocked":
            return (f"**UNLOCKED PRE-REGISTRATION: NO VERDICT.** {name}: {self.why}. A text counts as locked only "
                    "if every arm it names holds its sha256 (pass --evaluate-unlocked to judge it anyway).")
        if self.origin == "changed":
            return (f"**PREREG CHANGED: NO VERDICT.** {name} is not the text the study locked under that name "
                    f"(sha256 `{self.locked_sha256}`).")
        return None

    def summary(self) -> str:
        """What stdout says about it."""
        j = self.judgement.summary() if self.sequential is None else \
            f"{self.prereg.name}: {self.sequential.summary()}"
        if self.origin == "edited":
            return "WARNING: judged against an EDITED pre-registration (--evaluate-edited)\n" + j
        if self.origin == "evaluated unlocked":
            return (f"WARNING: UNLOCKED pre-registration {self.prereg.path.name} ({self.why}), judged at the user's "
                    "request (--evaluate-unlocked)\n" + j)
        return j

    def to_dict(self) -> dict:
        sens = self.judgement.sensitivity
        return {"origin": self.origin, "locked": self.locked, "locked_sha256": self.locked_sha256,
                **self.verdict.to_dict(), "details": self.judgement.details,
                "sensitivity": None if sens is None else {**sens.to_dict(), "line": sens.line(self.verdict)},
                **({} if self.sequential is None else {"sequential": self.sequential.to_dict()})}


def preregs_to_judge(runs: list[AnyRun], given: str | Path | None = None) -> list[Registration]:
    """The pre-registrations to judge over `runs` and how the runs hold them (locked or not)."""
    return registrations({r.arm: r.manifest for r in runs}, given)


def judge_registered(runs: list[AnyRun], todo: list[Registration], n_boot: int, seed: int, allow_ungated: bool,
                     evaluate_edited: bool = False, evaluate_unlocked: bool = False) -> list[Judged]:
    """Each registration's judgement: a verdict where it is locked (or the user asked), none otherwise."""
    out = []
    for reg in todo:
        pr = reg.prereg
        for name in pr.arms:
            r = next((r for r in runs if r.arm == name), None)
            if r is not None and r.gate_status == "not run" and not allow_ungated:
                raise AtlasError(f"{r.path}: its lossless gate checked no sequence, so nothing shows its drafts "
                                 f"were verified losslessly; no verdict on it (pass --allow-ungated to judge anyway)")
        lk = reg.locked.sha256 if reg.locked else None
        if reg.status == "changed" and not evaluate_edited:
            out.append(Judged(pr, "changed", Judgement(criteria.changed(reg.locked, pr)), lk))
        elif reg.status == "unlocked" and not evaluate_unlocked:
            out.append(Judged(pr, "unlocked", Judgement(criteria.unlocked(reg)), lk, reg.why))
        else:
            origin = {"locked": "locked", "changed": "edited", "unlocked": "evaluated unlocked"}[reg.status]
            seq = None
            if getattr(pr.spec, "sequential", None) is not None:    # decided by its confidence sequence
                from atlas_ab.analysis.sequential import view
                seq = view(pr, runs)
            out.append(Judged(pr, origin, criteria.judge(pr, runs, n_boot=n_boot, seed=seed), lk, reg.why, seq))
    return out

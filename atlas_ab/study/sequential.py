"""A sequential study: every arm runs wave by wave in lockstep, the study's locked registrations are
judged after each look (analysis/sequential/judge.py, an always-valid confidence sequence), and an arm
stops when every registration naming it has decided or its budget has ended.

One job drives every arm (`python -m atlas_ab -m +study=NAME`: the study sweeps no arm), in one
process: the arms must run the same documents in the same order and stop at the same wave, which
a sweep's independent jobs cannot promise; replay (`runner.mode=replay`) makes every arm after the
first cheap. Layout, in the sweep directory (a single run: its run directory):

```
<dir>/study.json          the study's manifest: each registration's looks, decision, stop, saving
<dir>/<i>_<arm>/          each arm's run (run/store.py), `stopped` when the study stopped it early;
                          its manifest's `sequential` holds the looks too
<dir>/prereg/             the locked registrations (config/prereg.py `lock`)
<dir>/study/              this job's Hydra files (.hydra/, run.log)
```

Resume (`runner.resume=auto`, with `hydra.sweep.dir=<dir>`) continues every arm from its stored
waves and re-judges every look from the stored data: a look is a function of the waves before it,
so a study killed at any point reaches the same looks and the same decision. A study whose
registrations are all closed is not run again.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Callable, Optional

from omegaconf import DictConfig, OmegaConf

from atlas_ab import AtlasError, atomic
from atlas_ab.clock import now
from atlas_ab.config.paths import resolve_path
from atlas_ab.config.prereg import Prereg, from_lock, load_prereg
from atlas_ab.run import claim
from atlas_ab.run.device import DeviceClaim
from atlas_ab.run.session import Job, RunSession, configs
from atlas_ab.run.store import config_diff
from atlas_ab.study.looks import Plan, check_schedule, plan_of, whole_clusters

log = logging.getLogger("atlas_ab")
STUDY_MANIFEST = "study.json"
SCHEMA = "atlas_ab.sequential_study/1"
DECIDED = ("MET", "NOT MET")
#: the judge's words for a look with nothing to judge yet (no cluster, no pair in the metric's denominator)
NOTHING_YET = ("no cluster holds", "no step pairs")
#: what pairs the arms: every arm must run these the same (the levers are what differ)
PAIRED_KEYS = ("workload", "model", "runner.batch_width", "runner.mode", "runner.seed", "runner.trajectories")


def sequential_preregs(study) -> list[Prereg]:
    """The study's registrations if it is sequential (any declares `sequential:`), else []. A study
    mixing sequential and fixed-n registrations is refused: a fixed-n question needs every wave."""
    prs = []
    for given in study.preregs:
        path = resolve_path(given)
        if not Path(path).is_file():
            return []       # the session names the missing file
        prs.append(load_prereg(path))
    seq = [p for p in prs if getattr(p.spec, "sequential", None) is not None]
    if seq and len(seq) != len(prs):
        fixed = next(p for p in prs if p not in seq)
        raise AtlasError(f"study {study.name!r} mixes sequential and fixed-n pre-registrations ({fixed.path.name} "
                         "has no sequential: block): a sequential study stops its arms early, a fixed-n question "
                         "needs every wave; run them as two studies")
    return seq


def _section(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg.get(part, {}) if isinstance(cfg, dict) else {}
    return cfg


def check_paired(study: str, arm_cfgs: dict[str, DictConfig]) -> None:
    """Every arm shares the workload (and what pairs its waves): refused in one line otherwise."""
    names = list(arm_cfgs)
    plain = {a: OmegaConf.to_container(c, resolve=True) for a, c in arm_cfgs.items()}
    first = names[0]
    for a in names[1:]:
        for key in PAIRED_KEYS:
            x, y = _section(plain[first], key), _section(plain[a], key)
            if x != y:
                diff = config_diff(x, y, ignored=(), prefix=key + ".") if isinstance(x, dict) and \
                    isinstance(y, dict) else [f"{key}: {x!r} -> {y!r}"]
                raise AtlasError(f"sequential study {study!r}: its arms do not share a workload ({first} vs {a}: "
                                 f"{diff[0]}); a sequential study pairs its arms' documents wave by wave")


@dataclasses.dataclass
class Question:
    """One sequential registration as the study runs it."""
    prereg: Prereg
    plan: Plan
    counts: list = dataclasses.field(default_factory=list)   # clusters at each look (cumulative)
    whole_at_look: int = 0            # whole clusters at the last look
    seen: list = dataclasses.field(default_factory=list)     # waves and documents at each look
    final: bool = False               # the last look was the budget's last
    result: Optional[dict] = None     # the last SequentialResult, as a dict
    closed_at: Optional[int] = None   # the wave (count) at which it decided or its budget ended

    @property
    def name(self) -> str:
        return self.prereg.name

    @property
    def arms(self) -> tuple[str, ...]:
        return self.prereg.arms


def default_judge(prereg, runs, *, looks=None, final=False):
    from atlas_ab.analysis.sequential import judge_sequential
    return judge_sequential(prereg, runs, looks=looks, final=final)


def load_seen(run_dir: Path, docs: list[int]):
    """The arm's run as the analysis reads it, cut to the documents a look has seen."""
    from atlas_ab.analysis.runs import load_run
    run = load_run(run_dir, optional=("oracle_hit2", "position"), allow_incomplete=True)
    keep = run.steps["doc_id"].isin(docs)
    return dataclasses.replace(run, steps=run.steps[keep].reset_index(drop=True))


class SequentialStudy:
    """Drives a sequential study's arms (see the module docstring). `arm_cfgs`: each arm's composed
    config, in the study's order; `study_dir`: where the arms and study.json go; `job_dir`: this
    job's own directory (locked while the study runs)."""

    def __init__(self, arm_cfgs: dict[str, DictConfig], study_dir: Path, job_dir: Optional[Path] = None,
                 out=None, judge: Callable = default_judge):
        self.arm_cfgs, self.dir = arm_cfgs, Path(study_dir)
        self.job_dir = Path(job_dir) if job_dir is not None else self.dir
        self.out = sys.stdout if out is None else out
        self.judge = judge
        first = next(iter(arm_cfgs.values()))
        self.study = OmegaConf.to_object(first.study)
        self.runner = first.runner
        self.sessions: dict[str, RunSession] = {}
        self.manifest: dict = {}

    # -- checks, before any model loads ------------------------------------------------------
    def check(self) -> list[Prereg]:
        for cfg in self.arm_cfgs.values():
            configs(cfg, self.out)          # every arm's keys, types, ranges and levers
        prs = sequential_preregs(self.study)
        if not prs:
            raise AtlasError(f"study {self.study.name!r} has no sequential pre-registration")
        check_paired(self.study.name, self.arm_cfgs)
        for p in prs:
            check_schedule(p.path.name, p.spec.sequential, int(self.runner.batch_width))
        return prs

    @property
    def manifest_path(self) -> Path:
        return self.dir / STUDY_MANIFEST

    def _save(self) -> None:
        atomic.write_json(self.manifest_path, self.manifest)

    def run(self, locked: bool = False) -> dict:
        """Check, then run (or resume) the study; `locked`: the caller holds the job directory's lock."""
        lock = None if locked else claim.take(self.job_dir)
        try:
            return self._run(self.check())
        finally:
            if lock is not None:
                lock.release()

    def _run(self, prs: list[Prereg]) -> dict:
        resume = self.runner.resume
        old = None
        if self.manifest_path.exists():
            if not resume:
                raise AtlasError(f"{self.dir} already holds a sequential study; continue it with "
                                 f"hydra.sweep.dir={self.dir} runner.resume=auto")
            old = json.loads(self.manifest_path.read_text())
            if old.get("status") in ("decided", "complete"):
                self.manifest = old
                self._print()
                return old
        arms = list(self.arm_cfgs)
        self.manifest = {"schema": SCHEMA, "study": self.study.name, "status": "running", "arms": {},
                         "preregs": {}, "started": (old or {}).get("started") or now(), "finished": None,
                         "resumes": (old or {}).get("resumes", []) + ([now()] if old else [])}
        dev = DeviceClaim(str(self.runner.device), 0)     # one device for every arm: they run in turn
        try:
            for i, arm in enumerate(arms):
                cfg = self.arm_cfgs[arm]
                if resume:
                    cfg = cfg.copy()
                    cfg.runner.resume = "auto"      # each arm continues in its own directory
                job = Job(run_dir=self.dir / f"{i}_{arm}", num=i, multirun=True, sweep_dir=self.dir,
                          device=dev.device)
                self.sessions[arm] = RunSession(cfg, job, out=self.out).open()
                self.manifest["arms"][arm] = str(job.run_dir)
            waves = self._waves()
            prs = [self._locked(p) for p in prs]
            questions = [Question(p, plan_of(p.name, p.spec.sequential, len(waves))) for p in prs]
            self.manifest["waves"] = {"total": len(waves), "batch_width": int(self.runner.batch_width)}
            self._drive(questions, waves)
        except BaseException as ex:
            self.manifest.update(status="failed", error=str(ex).splitlines()[0] if str(ex) else type(ex).__name__)
            self._save()
            raise
        finally:
            for s in self.sessions.values():
                s.close()
            dev.release()
        self._print()
        return self.manifest

    def _locked(self, pr: Prereg) -> Prereg:
        """The text the study locked under `pr`'s file name (what is judged, not today's file)."""
        entries = self.sessions[pr.arms[0]].store.manifest.get("preregs") or []
        entry = next(e for e in entries if Path(e["path"]).name == pr.path.name
                     or Path(resolve_path(e["path"])).name == pr.path.name)
        return from_lock(entry)

    def _waves(self) -> list[list[int]]:
        """The arms' waves, which must be one list (the same documents in the same order)."""
        lists = {a: s.waves for a, s in self.sessions.items()}
        first = next(iter(lists))
        for a, w in lists.items():
            if w != lists[first]:
                raise AtlasError(f"sequential study {self.study.name!r}: arms {first} and {a} run different "
                                 "waves (documents or their order differ): they cannot be paired")
        return lists[first]

    # -- the loop ------------------------------------------------------------------------------
    def _drive(self, questions: list[Question], waves: list[list[int]]) -> None:
        arms = list(self.sessions)
        doc_cluster = {q.name: self._doc_cluster(q) for q in questions}
        for w in range(1, len(waves) + 1):
            live = [a for a in arms if self._needed(a, questions)]
            if not live:
                break
            for a in live:
                self.sessions[a].run_waves(upto=w)
            for q in (q for q in questions if q.closed_at is None):
                docs, whole = whole_clusters(waves, w, doc_cluster[q.name])
                if whole and q.plan.is_look(w, whole, q.whole_at_look):
                    self._look(q, w, docs, whole)
            self._record(questions, waves, w)
            for a in live:
                if not self._needed(a, questions):
                    self._end_arm(a, questions, w, len(waves))
        for a in arms:
            if self.sessions[a].store.manifest.get("status") == "running":
                self._end_arm(a, questions, len(waves), len(waves))
        decided = all(q.result and q.result["decision"] in DECIDED for q in questions)
        self.manifest.update(status="decided" if decided else "complete", finished=now())
        self._save()

    def _doc_cluster(self, q: Question):
        """doc_id -> cluster of the registration's cluster unit (None: documents)."""
        if getattr(q.prereg.spec.cluster, "value", q.prereg.spec.cluster) == "document":
            return None
        w = self.sessions[q.arms[0]].store.manifest.get("workload") or {}
        if w.get("doc_cluster") is not None and w.get("cluster_unit", "document") != "document":
            return w["doc_cluster"]
        return None

    def _needed(self, arm: str, questions: list[Question]) -> bool:
        """An arm runs on while a registration naming it is open (an arm none names: while any is)."""
        mine = [q for q in questions if arm in q.arms]
        return any(q.closed_at is None for q in (mine or questions))

    def _look(self, q: Question, w: int, docs: list[int], whole: int) -> None:
        runs = [load_seen(self.sessions[a].job.run_dir, docs) for a in q.arms]
        final = q.plan.is_last(w, whole)
        try:
            n = self.judge(q.prereg, runs).looks[-1].n_clusters      # clusters with a difference, seen whole
        except AtlasError as e:
            if not any(w in str(e) for w in NOTHING_YET):
                raise
            if final:       # the budget ended with nothing to judge (e.g. warm turns in one-turn documents)
                q.result, q.final, q.closed_at = {"decision": "UNDERPOWERED", "decided_at": None, "looks": [],
                                                  "why": str(e)}, True, w
            return
        if q.counts and n <= q.counts[-1]:
            if final:
                q.final, q.closed_at = True, w
                if q.result and q.result["decision"] == "UNDECIDED":   # as judging it final would say
                    q.result["decision"] = q.result["looks"][-1]["decision"] = "UNDERPOWERED"
            return
        res = self.judge(q.prereg, runs, looks=[*q.counts, n], final=final)
        q.counts.append(n)
        q.whole_at_look = whole
        q.seen.append({"waves": w, "documents": len(docs)})
        q.result = {**res.to_dict(), "waves": w, "documents": len(docs)}
        for lk, seen in zip(q.result["looks"], q.seen):
            lk.update(seen)
        q.final = final
        if res.decision in DECIDED or final:
            q.closed_at = w
        log.info("%s: look %d after %d waves (%d documents): %s", q.name, len(q.counts), w, len(docs),
                 res.decision)

    def _entry(self, q: Question, n_waves: int) -> dict:
        r = q.result or {}
        e = {"path": str(q.prereg.path), "sha256": q.prereg.sha256, "arms": list(q.arms),
             "plan": dataclasses.asdict(q.plan), "looks": r.get("looks", []), "decision": r.get("decision"),
             "decided_at": r.get("decided_at"), "final": q.final, "closed_at_wave": q.closed_at,
             "result": {k: v for k, v in r.items() if k != "looks"}}
        if q.closed_at is not None:
            e["saving"] = self._saving(q, n_waves)
        return e

    def _saving(self, q: Question, n_waves: int) -> dict:
        """Verify steps (k >= 1, on the registered turns, as the fixed-n judge counts them) each arm
        ran up to the stop against the fixed-n registration's `min_n_per_arm` (the registration keeps
        its fixed-n question's minimum), and the waves not run."""
        from atlas_ab.analysis.runs import load_run

        docs = {d for w in self.sessions[q.arms[0]].waves[:q.closed_at] for d in w}
        turns = getattr(q.prereg.spec.turns, "value", q.prereg.spec.turns)
        used = {}
        for a in q.arms:
            st = load_run(self.sessions[a].job.run_dir, allow_incomplete=True).steps
            on = {"all": st["turn"] >= 0, "cold": st["turn"] == 0, "warm": st["turn"] >= 1}[turns]
            used[a] = int(((st["k"] > 0) & st["doc_id"].isin(docs) & on).sum())
        fixed = q.prereg.spec.min_n_per_arm
        out = {"waves_run": q.closed_at, "waves_budget": q.plan.budget_waves, "waves_total": n_waves,
               "waves_not_run": n_waves - q.closed_at, "documents_run": len(docs),
               "documents_budget": sum(len(w) for w in self.sessions[q.arms[0]].waves[:q.plan.budget_waves]),
               "steps_per_arm": used,
               "fixed_n_per_arm": fixed}
        if fixed:
            out["saved_per_arm"] = {a: fixed - u for a, u in used.items()}
            out["saved_share"] = 1 - max(used.values()) / fixed
        return out

    def _record(self, questions: list[Question], waves, w: int) -> None:
        """Every look so far, in study.json and in each arm's manifest."""
        self.manifest["waves_run"] = w
        self.manifest["preregs"] = {q.name: self._entry(q, len(waves)) for q in questions}
        self._save()
        for a, s in self.sessions.items():
            mine = {q.name: {k: v for k, v in self.manifest["preregs"][q.name].items() if k != "plan"}
                    for q in questions if a in q.arms}
            if s.store.manifest.get("status") == "running":
                s.note("sequential", {"study": self.study.name, "study_manifest": str(self.manifest_path.resolve()),
                                      "preregs": mine})

    def _end_arm(self, arm: str, questions: list[Question], w: int, n_waves: int) -> None:
        s = self.sessions[arm]
        if len(s.store.done_waves()) >= n_waves:
            s.finish()
        else:
            closed = [q for q in questions if arm in q.arms]
            s.stop({"by": self.study.name, "at_wave": w,
                    "decisions": {q.name: (q.result or {}).get("decision") for q in closed}})
        s.close()

    # -- what the user sees ------------------------------------------------------------------
    def _print(self) -> None:
        for line in summary_lines(self.manifest):
            print(line, file=self.out)
        self.out.flush()


def summary_lines(m: dict) -> list[str]:
    """The study's outcome: each registration's decision, where it stopped, and its saving."""
    from atlas_ab.analysis.sequential import decisive_look, saving_words

    lines = [f"sequential study {m.get('study')}: {m.get('status')} ({m.get('waves_run', 0)} of "
             f"{(m.get('waves') or {}).get('total', '?')} waves run)"]
    for name, e in (m.get("preregs") or {}).items():
        looks = e.get("looks") or []
        lk = decisive_look(looks, e.get("decided_at"))
        where = (f"at look {lk['index']} of {len(looks)}, after {lk.get('documents')} documents "
                 f"({lk.get('waves')} waves): estimate {lk['estimate']:+.4f}, bounds [{lk['lower']:+.4f}, "
                 f"{lk['upper']:+.4f}]") if lk else "no look yet"
        lines.append(f"  {name}: {e.get('decision') or 'UNDECIDED'} {where}")
        sv = e.get("saving")
        if sv:
            lines.append(f"  saving: {saving_words(sv)}")
    for arm, d in (m.get("arms") or {}).items():
        lines.append(f"  arm {arm}: {d}")
    return lines


def arm_override(overrides: list[str]) -> Optional[str]:
    """The command line's choice of an arm, if any (`+arm=X`, `arm=X`): a sequential study runs all its own."""
    return next((o for o in overrides if o.split("=", 1)[0].lstrip("+~") == "arm"), None)


def drive(cfg: DictConfig, job: Job, overrides: list[str], out=None, search: tuple = ()) -> dict:
    """`python -m atlas_ab [-m] +study=NAME` for a sequential study: compose each arm as
    `python -m atlas_ab OVERRIDES +arm=ARM` would, check them, and run the study."""
    lock = claim.take(job.run_dir)      # parked for this job while Hydra made its directory
    try:
        return _drive(cfg, job, overrides, out, list(search))
    finally:
        lock.release()


def _drive(cfg: DictConfig, job: Job, overrides: list[str], out, search: list[str]) -> dict:
    from hydra import compose

    study = OmegaConf.to_object(cfg.study)
    given = arm_override(overrides)
    if given is not None:
        raise AtlasError(f"study {study.name!r} is sequential: one job runs all its arms ({', '.join(study.arms)}) "
                         f"in lockstep; drop {given}")
    if job.multirun and job.num > 0:
        raise AtlasError(f"study {study.name!r} is sequential: one job runs all its arms, and this sweep launched "
                         f"job {job.num}; sweep no key with -m (run one study per setting)")
    if not study.arms:
        raise AtlasError(f"study {study.name!r} is sequential but lists no arms (study.arms)")
    arm_cfgs = {a: compose(config_name="config", overrides=[*search, *overrides, f"+arm={a}"]) for a in study.arms}
    study_dir = job.sweep_dir if job.multirun else job.run_dir
    return SequentialStudy(arm_cfgs, study_dir, job.run_dir, out=out).run(locked=True)

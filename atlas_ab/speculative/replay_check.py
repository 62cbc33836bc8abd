"""How a replay run checks itself.

* The lossless gate by replay: the committed text must be exactly the stored
  target-only greedy trajectory (trajectory.greedy built it), so a replay run is
  lossless by construction; `replay_gate` checks that it committed those tokens and
  records the gate with `"by": "replay"`.
* Replay against live (`runner.replay_check_waves`): the same wave also runs live;
  `compare_live` pairs the two step tables on (doc_id, turn, position) and counts the
  rows whose drafts or accept_len differ, and the sequences whose live text left the
  stored trajectory (a committed token differs: in bf16, at a near-tie). On CPU fp32
  every count is 0.
"""
from __future__ import annotations

import numpy as np

KEY = ["doc_id", "turn", "position"]


def replay_gate(traj, generated) -> dict:
    """The wave's committed tokens ([seq][turn] -> G tokens) against the stored ones."""
    # (torch; the rest of this module, read by the store, is not)
    from atlas_ab.speculative.lossless_gate import GateResult

    res = GateResult(checked_sequences=traj.batch, passed=True)
    for b, (ours, stored) in enumerate(zip(generated, traj.generated())):
        for t, (a, s) in enumerate(zip(ours, stored)):
            res.checked_tokens += len(s)
            bad = [g for g, (x, y) in enumerate(zip(a, s)) if x != y] + ([len(s)] if len(a) != len(s) else [])
            if bad:
                res.divergences += 1
                res.passed = False
                if res.first_divergence is None:
                    g = bad[0]
                    res.first_divergence = dict(doc_id=int(traj.doc_ids[b]), turn=t, token=g,
                                                speculative=int(a[g]) if g < len(a) else None,
                                                target_only=int(s[g]) if g < len(s) else None, margin=None,
                                                near_tie=False, why="replay committed other than the stored "
                                                                    "trajectory")
                break
    return {**res.to_dict(), "by": "replay"}


def _departures(traj, generated) -> list[dict]:
    """Per sequence, the first committed token where the live text left the stored one."""
    out = []
    for b, (live, stored) in enumerate(zip(generated, traj.generated())):
        for t, (a, s) in enumerate(zip(live, stored)):
            diff = [g for g, (x, y) in enumerate(zip(a, s)) if x != y]
            if diff:
                g = diff[0]
                # (top1 - top2, top1) of the argmax that chose token g, at the position before it (read
                # where needed: building the whole [seq][turn][g] table took ~0.1 s a 192-sequence arm)
                gap, top1 = (float(v) for v in traj.margins[b, traj.gen_start[b][t] - 1 + g])
                out.append(dict(doc_id=int(traj.doc_ids[b]), turn=t, token=g, live=int(a[g]), stored=int(s[g]),
                                margin=gap, relative_margin=gap / max(1.0, abs(top1))))
                break
    return out


def compare_live(traj, replay_steps, live_steps, live_generated) -> dict:
    """Replay vs live over one wave (both step tables as pyarrow)."""
    cols = KEY + ["drafts", "accept_len"]
    r = replay_steps.select(cols).to_pandas()
    lv = live_steps.select(cols).to_pandas()
    m = r.merge(lv, on=KEY, suffixes=("_replay", "_live"))
    drafts_differ = np.array([not np.array_equal(a, b) for a, b in zip(m.drafts_replay, m.drafts_live)], bool)
    differ = drafts_differ | (m.accept_len_replay.to_numpy() != m.accept_len_live.to_numpy())
    dep = _departures(traj, live_generated)
    # rows of turns before any departure: replay and live had the very same context there
    first_dep = {d["doc_id"]: d["turn"] for d in dep}
    same_ctx = np.array([t < first_dep.get(int(d), 1 << 30) for d, t in zip(m.doc_id, m.turn)], bool)
    return {"waves": 1, "rows_replay": len(r), "rows_live": len(lv), "rows_matched": len(m),
            "rows_differ": int(differ.sum()), "rows_matched_same_context": int(same_ctx.sum()),
            "rows_differ_same_context": int((differ & same_ctx).sum()),
            "sequences": traj.batch, "trajectories_left": len(dep), "departures": dep}


def aggregate(checks) -> dict | None:
    """The run's replay-vs-live figures over its shards (None when no wave was checked)."""
    checks = [c for c in checks if c]
    if not checks:
        return None
    out = {k: sum(int(c[k]) for c in checks) for k in ("waves", "rows_replay", "rows_live", "rows_matched",
                                                        "rows_differ", "rows_matched_same_context",
                                                        "rows_differ_same_context", "sequences",
                                                        "trajectories_left")}
    out["share_differ"] = out["rows_differ"] / out["rows_matched"] if out["rows_matched"] else None
    out["share_differ_same_context"] = (out["rows_differ_same_context"] / out["rows_matched_same_context"]
                                        if out["rows_matched_same_context"] else None)
    out["departures"] = [d for c in checks for d in c["departures"]]
    return out

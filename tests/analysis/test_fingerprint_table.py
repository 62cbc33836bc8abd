"""The fingerprint verification table on synthetic events of a modelled engine."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.__main__ import main as cli_main
from atlas_ab.analysis.fingerprints import COLUMNS, fingerprint_table, read_events
from atlas_ab.telemetry.schema import EVENT_SCHEMA


def simulate_events(shift: int = 0, row_space: str = "compact", n_seqs: int = 3, steps: int = 30,
                    K: int = 2, prompt: int = 6, seed: int = 0) -> pd.DataFrame:
    """Events of a modelled refeed engine, per docs/telemetry.md.

    The ring side of the engine (every ring_write, and the lookup a propose makes
    for its own saved hidden) derives labels through one helper,
    label_of(position q) = q + 1 + shift. The feed side independently reads pair
    key k from label k + 1. With shift = 0 the two agree (the documented
    convention); with shift != 0 the ring is still self-consistent, so rows a-d
    cannot tell, while pair key k is handed the hidden of position k - shift.

    Per step at propose position p: feed the pending keys (a label not in the
    ring is not delivered, so no event), propose (consumes the target hidden of
    position p - 1), accept a of K drafts, ring the target hiddens of positions
    p..p+a, and leave keys p-1..p+a-1 pending for re-feed: key p-1 is the row
    the propose itself wrote, so its re-feed is the checkable pair of row e.
    The first propose of a sequence finds no ring row (the prefill rings none).
    """
    rng = np.random.default_rng(seed)
    rows, order = [], 0

    def emit(**kw):
        nonlocal order
        base = dict(label=-1, key=-1, rope=-1, slot=-1, position=-1, fp2=None)
        rows.append({**base, **kw, "order": order})
        order += 1

    label_of = lambda q: q + 1 + shift  # noqa: E731
    for s in range(n_seqs):
        seq = dict(doc_id=s // 2, turn=s % 2, seq=s)
        hidden = rng.integers(-2**63, 2**63 - 1, size=prompt + steps * (K + 1) + 2, dtype=np.int64)
        ring: dict[int, int] = {}
        drafter_row = 0

        def row_place(key):
            nonlocal drafter_row
            slot = drafter_row if row_space == "compact" else key
            rope = key + 1 if row_space == "compact" else slot
            drafter_row += 1
            return dict(key=key, rope=rope, slot=slot)

        for key in range(prompt - 1):  # drafter prefill: pairs (token k+1, hidden k)
            emit(**seq, step=-1, kind="context", fp=int(hidden[key]), **row_place(key))
        p, pending = prompt, []
        for step in range(steps):
            for key in pending:
                if key + 1 in ring:
                    emit(**seq, step=step, kind="feed", label=key + 1, fp=ring[key + 1], **row_place(key))
            emit(**seq, step=step, kind="propose", position=p, fp=int(hidden[p - 1]),
                 fp2=ring.get(label_of(p - 1)))
            a = int(rng.integers(0, K + 1))
            for q in range(p, p + a + 1):
                ring[label_of(q)] = int(hidden[q])
                emit(**seq, step=step, kind="ring_write", label=label_of(q), fp=int(hidden[q]),
                     fp2=int(hidden[q]))
            pending = list(range(p - 1, p + a))
            p += a + 1
    fp2 = pd.array([r.pop("fp2") for r in rows], dtype="Int64")  # never via float64
    df = pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "fp2"])
    df["fp2"] = fp2
    return df[COLUMNS]


def test_correct_run_reads_100_percent_on_every_row():
    events = simulate_events()
    table = fingerprint_table(events, "compact")
    assert table.ok, table.summary()
    for r in table.rows:
        assert r.checked > 0 and r.rate == 1.0, r
    # the first propose of each of the 3 sequences has no ring row, as in the reference engine
    n_prop = int((events["kind"] == "propose").sum())
    assert table.row("d").checked == n_prop - 3
    assert "3 proposes had no ring row" in table.row("d").note
    # context rows are counted and listed per sequence
    assert table.context_rows == 3 * 5 and len(table.context) == 3
    assert all(c.rope_ok == c.rows == 5 and (c.key_min, c.key_max) == (0, 4) for c in table.context)
    assert "every row 100%" in table.summary()


def test_one_corrupt_ring_row_fails_row_a_there_and_row_b_for_its_label():
    events = simulate_events()
    writes = events[events["kind"] == "ring_write"]
    feeds = events[events["kind"] == "feed"]
    proposes = events[events["kind"] == "propose"]
    # a ring row some feed reads but no propose looks up (label != a propose
    # position), so rows d and e stay clean and the damage is local
    looked_up = set(zip(proposes["seq"], proposes["position"]))
    fed = set(zip(feeds["seq"], feeds["label"]))
    victim = next(r for r in writes.itertuples()
                  if (r.seq, r.label) in fed and (r.seq, r.label) not in looked_up)
    bad = events.copy()
    bad.loc[victim.Index, "fp2"] = victim.fp2 ^ 1

    table = fingerprint_table(bad, "compact")
    assert table.row("a").failures == (victim.order,)
    assert table.row("a").matched == table.row("a").checked - 1
    want_b = tuple(feeds[(feeds["seq"] == victim.seq) & (feeds["label"] == victim.label)
                         & (feeds["order"] > victim.order)]["order"])
    assert want_b and table.row("b").failures == want_b
    for name in "cde":
        assert table.row(name).ok
    assert not table.ok and "FAILED: rows a, b" in table.summary()


def test_shifted_mapping_passes_rows_a_to_d_and_only_row_e_sees_it():
    # The reference engine's point (mtp_refeed_shift): the fingerprints are self-consistent
    # under a wrong label convention; only the independent consumer (row e) differs.
    table = fingerprint_table(simulate_events(shift=+1), "compact")
    for name in "abcd":
        assert table.row(name).ok and table.row(name).checked > 0, table.row(name)
    e = table.row("e")
    assert e.checked > 10 and e.matched == 0, e
    # and the same engine with the right convention checks as many pairs, all clean
    assert fingerprint_table(simulate_events(shift=0), "compact").row("e").ok


def test_a_warm_turn_reads_ring_labels_written_on_the_previous_turn():
    # One sequence (doc 0, slot 0) whose second half is turn 1: the ring and the
    # drafter rows carry over, so the join is per (doc_id, seq), not per turn.
    events = simulate_events(n_seqs=1, steps=30)
    warm = events["step"] >= 15
    events.loc[warm, "turn"] = 1
    table = fingerprint_table(events, "compact")
    assert table.ok, table.summary()
    assert table.n_sequences == 1
    # the check above means something only if a turn-1 feed read a turn-0 write
    writes = events[events["kind"] == "ring_write"]
    first_write_turn = writes.groupby("label")["turn"].first()
    feeds = events[(events["kind"] == "feed") & warm]
    assert (first_write_turn.reindex(feeds["label"]).to_numpy() == 0).any()


@pytest.mark.parametrize("space", ["compact", "dense"])
def test_rope_rule_follows_the_row_space(space):
    other = "dense" if space == "compact" else "compact"
    events = simulate_events(row_space=space)
    assert fingerprint_table(events, space).ok
    wrong = fingerprint_table(events, other)
    assert wrong.row("c").matched == 0 and wrong.row("c").checked > 0
    assert all(c.rope_ok == 0 for c in wrong.context)
    assert [r.name for r in wrong.rows if not r.ok] == ["c"]


def test_rows_with_nothing_to_check_are_not_reported_as_confirmed():
    events = simulate_events()
    table = fingerprint_table(events[events["kind"] != "feed"], "compact")
    assert [r.checked for r in table.rows if r.name in "bce"] == [0, 0, 0]
    assert table.ok  # nothing failed...
    assert "nothing to check on rows b, c, e" in table.summary()  # ...but nothing was confirmed
    assert "every row 100%" not in table.summary()


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(AtlasError, match="no fingerprint events"):
        fingerprint_table(simulate_events().iloc[:0], "compact")
    with pytest.raises(AtlasError, match="row space"):
        fingerprint_table(simulate_events(), "sparse")
    floated = simulate_events()
    floated["fp2"] = floated["fp2"].astype(float)
    with pytest.raises(AtlasError, match="float"):
        fingerprint_table(floated, "compact")


def write_run(root, events: pd.DataFrame | None, row_space="compact", debris=False):
    (root / "steps").mkdir(parents=True)
    shard = {"steps": "steps/part-00000.parquet", "events": None, "rows": 0, "docs": []}
    if events is not None:
        (root / "events").mkdir()
        pq.write_table(pa.Table.from_pandas(events, schema=EVENT_SCHEMA, preserve_index=False),
                       root / "events/part-00000.parquet")
        shard["events"] = "events/part-00000.parquet"
    if debris:  # a crashed shard the manifest does not list (an unfinished run): must be ignored
        pq.write_table(pa.Table.from_pandas(events.iloc[:5], schema=EVENT_SCHEMA, preserve_index=False),
                       root / "events/part-00001.parquet")
    (root / "manifest.json").write_text(json.dumps(
        {"schema": 1, "status": "running" if debris else "complete", "arm": "t", "row_space": row_space,
         "shards": [shard]}))
    return root


def test_reader_round_trips_64_bit_fingerprints_and_null_fp2(tmp_path):
    events = simulate_events()
    write_run(tmp_path, events, debris=True)
    got, manifest = read_events(tmp_path, allow_incomplete=True)
    assert manifest["row_space"] == "compact"
    assert len(got) == len(events)  # the unlisted shard was ignored
    assert got["fp"].astype("int64").tolist() == events["fp"].tolist()  # no float rounding
    assert got["fp2"].isna().sum() == events["fp2"].isna().sum() > 0
    assert fingerprint_table(got, "compact").ok


def test_cli_prints_the_table_and_json(tmp_path, capsys):
    write_run(tmp_path, simulate_events(shift=1))
    assert cli_main(["fingerprints", str(tmp_path)]) == 1  # row e fails
    out = capsys.readouterr().out
    assert "| a. ring copy landed (ring_write fp == fp2) |" in out and "FAILED: rows e" in out
    assert cli_main(["fingerprints", str(tmp_path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [r["check"] for r in doc["rows"]] == list("abcde")
    assert doc["rows"][4]["rate"] == 0.0 and doc["rows"][0]["rate"] == 1.0


def test_cli_without_events_exits_2_with_one_line(tmp_path, capsys):
    write_run(tmp_path / "noevents", None)
    assert cli_main(["fingerprints", str(tmp_path / "noevents")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no fingerprint events" in err
    assert cli_main(["fingerprints", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().err

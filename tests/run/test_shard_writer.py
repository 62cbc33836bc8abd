"""ShardWriter: shards land in wave order with one in flight; a failed write is raised where the
in-line write would have been seen (the next submit, or close); the caller's own failure still
lands the shard in flight. Literal cases on a store double, then a run written both ways."""
import json
import threading
import time

import pytest

from atlas_ab import AtlasError
from atlas_ab.run.shard_writer import ShardWriter
from tests.helpers import faults
from tests.helpers.cli import cli


class Store:
    """add_shard records (wave, thread name); a wave in `slow` takes 50 ms; one in `bad` fails."""

    def __init__(self, slow=(), bad=()):
        self.landed, self.slow, self.bad = [], set(slow), set(bad)

    def add_shard(self, wave, *rest, **kw):
        if wave in self.slow:
            time.sleep(0.05)
        if wave in self.bad:
            raise AtlasError(f"cannot write steps/part-{wave:05d}.parquet: No space left on device")
        self.landed.append((wave, threading.current_thread().name))


@pytest.mark.parametrize("behind", [True, False])
def test_shards_land_in_wave_order_one_in_flight(behind):
    store = Store(slow={0, 2})
    with ShardWriter(store, behind=behind) as w:
        for i in range(4):
            w.submit(i, [i], None)
            # one in flight: every shard before this one has landed
            assert [x for x, _ in store.landed] == list(range(i + (not behind)))
    assert [x for x, _ in store.landed] == [0, 1, 2, 3]
    assert all(name.startswith("atlas-shards") == behind for _, name in store.landed)


def test_a_failed_write_is_raised_at_the_next_submit():
    store = Store(bad={1})
    w = ShardWriter(store)
    w.submit(0, [0], None)
    w.submit(1, [1], None)
    with pytest.raises(AtlasError, match="No space left on device"):
        w.submit(2, [2], None)
    w.close()
    assert [x for x, _ in store.landed] == [0]


def test_a_failed_last_write_is_raised_at_close():
    store = Store(bad={1})
    with pytest.raises(AtlasError, match="part-00001.parquet"):
        with ShardWriter(store) as w:
            w.submit(0, [0], None)
            w.submit(1, [1], None)


def test_the_callers_failure_still_lands_the_shard_in_flight():
    store = Store(slow={0})
    with pytest.raises(RuntimeError, match="wave 1 failed"):
        with ShardWriter(store) as w:
            w.submit(0, [0], None)
            raise RuntimeError("wave 1 failed")
    assert [x for x, _ in store.landed] == [0]


def test_a_run_written_behind_equals_one_written_in_line(tmp_path):
    """The same shards, byte for byte, and the same manifest but for wall times."""
    runs = {}
    for behind in (True, False):
        d = tmp_path / f"behind_{behind}"
        code, _, err = cli(*faults.FAKE, f"hydra.run.dir={d}", f"runner.write_behind={behind}",
                           "workload.n_docs=6", "runner.batch_width=2")
        assert code == 0, err
        m = json.loads((d / "manifest.json").read_text())
        shards = [{k: v for k, v in s.items() if k != "seconds"} for s in m["shards"]]
        files = {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.glob("*s/part-*.parquet"))}
        runs[behind] = (shards, m["rows"], files)
    assert len(runs[True][0]) == 3 and runs[True] == runs[False]

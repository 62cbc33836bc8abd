"""FINGERPRINTS at static shapes are hashed inside the step (no snapshot, no gather on the host
path); they must be the very fingerprints the wave-end hashing of snapshots gives, event for event."""
import pandas as pd
import pyarrow as pa
import pytest

from atlas_ab.analysis.fingerprints import fingerprint_table
from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.telemetry.fingerprint import fingerprint_rows
from tests.helpers.tiny import tiny_docs, tiny_models

G = 10
ARMS = {"refeed_on": ArmConfig(catchup=True, refeed=True),
        "catchup_shift": ArmConfig(catchup=True, refeed=True, refeed_shift=-1, num_drafts=3),
        "dense_prefill": ArmConfig(catchup=True, refeed=True, drafter_prefill=True, row_space="dense"),
        "gated": ArmConfig(catchup=True, draft_conf=0.2, fingerprints=True)}


@pytest.fixture(scope="module")
def models():
    return tiny_models()


def events(models, arm, in_step: bool) -> pd.DataFrame:
    trunk, mtp = models
    w = Wave(LiveTarget(trunk, graphs=True), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), arm,
             tiny_docs(n=4, turns=3, chunk=12), G, fingerprint_rows=fingerprint_rows)
    assert w.probe.in_step
    if not in_step:
        w.probe.mode = "snapshot"    # the same static-shape step, its rows snapshotted instead
    return w.run().events.table().to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


@pytest.mark.parametrize("name", list(ARMS))
def test_in_step_fingerprints_equal_the_snapshot_ones(models, name):
    snap, in_step = (events(models, ARMS[name], flag) for flag in (False, True))
    assert len(snap) > 0 and set(snap.kind) >= {"propose", "ring_write"}
    pd.testing.assert_frame_equal(snap, in_step, check_exact=True)
    t = fingerprint_table(in_step, ARMS[name].row_space)
    # SHIFT moves the re-fed labels: the table must see the mapping break (that is what SHIFT validates)
    assert all(r.ok for r in t.rows) == (ARMS[name].refeed_shift == 0), t.summary()

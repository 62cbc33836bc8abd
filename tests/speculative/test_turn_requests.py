"""PREFIX_REUSE and CARRY_DRAFTER (speculative/turn_requests.py): a warm turn as a new request over a
prefix cache. Carried, the drafter is the one a run without prefix_reuse keeps (one request for all
turns): the same steps, exactly. Fresh, it holds no rows at a warm turn's first propose; fresh and
prefilled (DRAFTER_PREFILL), one row per pair key of the whole prompt, from the hiddens the run
computed; the combinations a new request cannot run are refused in one line."""
import numpy as np
import pandas as pd
import pytest
import torch

from atlas_ab import AtlasError
from atlas_ab.config.structured import ArmConfig, WorkloadConfig, validate_arm, validate_run
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.speculative.trajectory import greedy
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.float_sensitive
G = 8


@pytest.fixture(scope="module")
def models():
    return tiny_models()


def steps(models, arm, docs, graphs=False, wave=False):
    trunk, mtp = models
    w = Wave(LiveTarget(trunk, graphs), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), arm, docs, G)
    t = w.run()
    table = t.steps.table().to_pandas().drop(columns=list(TIMING_COLUMNS))
    return (table, w) if wave else table


@pytest.mark.parametrize("pair", [
    (ArmConfig(name="x"), ArmConfig(name="x", prefix_reuse=True, carry_drafter=True)),
    (ArmConfig(name="x", drafter_prefill=True),
     ArmConfig(name="x", prefix_reuse=True, carry_drafter=True, drafter_prefill=True)),
    (ArmConfig(name="x", drafter_prefill=True, catchup=True, refeed=True, row_space="dense"),
     ArmConfig(name="x", drafter_prefill=True, catchup=True, refeed=True, row_space="dense", prefix_reuse=True,
               carry_drafter=True)),
], ids=["baseline", "drafter_prefill_on", "dense_prefill_refeed"])
def test_a_carried_drafter_is_the_one_request_drafter(models, pair):
    docs = tiny_docs(n=4, turns=3, chunk=10)
    pd.testing.assert_frame_equal(steps(models, pair[0], docs), steps(models, pair[1], docs), check_exact=True)


def first_steps(table):
    return table[table.step == 0].set_index(["doc_id", "turn"]).sort_index()


@pytest.mark.parametrize("graphs", [False, True], ids=["dynamic", "static"])
def test_a_fresh_drafter_holds_no_rows_at_a_warm_turns_first_propose(models, graphs):
    docs = tiny_docs(n=4, turns=3, chunk=10)
    fresh = first_steps(steps(models, ArmConfig(name="reuse", prefix_reuse=True), docs, graphs))
    carried = first_steps(steps(models, ArmConfig(name="base"), docs, graphs))
    warm = fresh.index.get_level_values("turn") > 0
    assert (fresh.drafter_rows[warm] == 0).all()
    assert (carried.drafter_rows[warm] > 0).all()
    # turn 0 (a prefill from position 0: the capture runs) is the same in both
    cold = ~warm
    assert fresh.drafter_rows[cold].tolist() == carried.drafter_rows[cold].tolist()
    assert (fresh.drafter_rows[cold] > 0).all()


@pytest.mark.parametrize("graphs", [False, True], ids=["dynamic", "static"])
def test_a_fresh_prefilled_drafter_holds_every_key_of_the_prompt(models, graphs):
    """reuse_prefill: at a warm turn's first propose (position n) the drafter holds pair keys 0 .. n-2,
    one row each, all built from target hiddens (row_target), and the hiddens it was handed are the
    target's: the kept rows equal the target-only greedy trajectory's hiddens (atol 1e-5: the trajectory
    runs one-token forwards, the verify K+1-row ones)."""
    docs = tiny_docs(n=4, turns=3, chunk=10)
    arm = ArmConfig(name="reuse_prefill", prefix_reuse=True, drafter_prefill=True)
    table, wave = steps(models, arm, docs, graphs, wave=True)
    first = first_steps(table)
    warm = first.index.get_level_values("turn") > 0
    assert (first.drafter_rows[warm] == first.position[warm] - 1).all()
    traj = greedy(models[0], docs, G, keep_hiddens=True)
    kept = wave.kept.rows
    for b in range(len(docs)):
        end = int(wave.kv_len[b])
        torch.testing.assert_close(kept[b, :end], traj.hiddens[b, :end].to(kept.dtype), atol=1e-5, rtol=1e-5)


def test_refusals_are_one_line():
    with pytest.raises(AtlasError, match="carry_drafter=true needs prefix_reuse=true"):
        validate_arm(ArmConfig(carry_drafter=True))
    with pytest.raises(AtlasError, match="catchup under prefix_reuse needs carry_drafter=true"):
        validate_arm(ArmConfig(prefix_reuse=True, catchup=True))
    with pytest.raises(AtlasError, match="MTP proposer's rows only"):
        validate_arm(ArmConfig(proposer="draft_model", prefix_reuse=True))
    validate_arm(ArmConfig(prefix_reuse=True, carry_drafter=True, catchup=True))
    from atlas_ab.config.structured import ModelConfig, RunnerConfig
    for arm, first in ((ArmConfig(name="c", prefix_reuse=True, carry_drafter=True), "carry_drafter"),
                       (ArmConfig(name="r", prefix_reuse=True), "prefix_reuse")):
        with pytest.raises(AtlasError) as e:
            validate_run(arm, ModelConfig(), WorkloadConfig(turns=1), RunnerConfig())
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"arm {arm.name!r}: {first}=true") and "workload.turns=1" in msg


def test_the_kept_hiddens_are_put_where_their_positions_are():
    from atlas_ab.speculative.turn_requests import PositionHiddens
    k = PositionHiddens(2, 8, 1, torch.float32, "cpu")
    k.put_prefill(torch.tensor([[[1.], [2.], [3.]], [[4.], [5.], [0.]]]), np.array([0, 2]), np.array([3, 2]))
    k.put_committed(torch.tensor([[[6.], [7.], [8.]], [[9.], [10.], [11.]]]), np.array([3, 4]), np.array([2, 3]),
                    np.array([True, False]))
    assert k.rows[:, :, 0].tolist() == [[1, 2, 3, 6, 7, 0, 0, 0], [0, 0, 4, 5, 0, 0, 0, 0]]

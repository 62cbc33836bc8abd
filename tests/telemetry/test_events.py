"""The events log's runs of steps (`EventLog.add_steps`, what a run-ahead chunk hands over): laid
out in event order on the device from the steps' own outputs, numbered with the log's other
batches. Literal cases."""
import numpy as np
import pytest
import torch

from atlas_ab.telemetry.events import COLUMNS, EventLog, StepEvents, lay_out_steps

# A step's output row per sequence, X = 11 columns:
#   0-1 feed slots (-1: none), 2-3 feed labels, 4 tokens left (> 0: active), 5 position,
#   6-7 the propose's fp and fp2, 8-9 the feed rows' fp, 10 whether the propose's fp2 is valid
FEED = StepEvents.of("feed", [0, 1], -1, label=[2, 3], key=([2, 3], -1), slot=[0, 1], fp=[8, 9])
PROPOSE = StepEvents.of("propose", [4], 0, position=[5], fp=[6], fp2=[7], fp2_valid=[10])


def test_step_events_of_names_each_fields_columns():
    assert FEED == StepEvents("feed", (0, 1), -1, ((2, 3), (2, 3), (-1, -1), (0, 1), (-1, -1), (8, 9), (-1, -1),
                                                   (-1, -1)), (0, -1, -1, 0, -1, 0, 0, 0))
    assert PROPOSE.add == (-1, -1, -1, -1, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="no column \\['fp3'\\]"):
        StepEvents.of("propose", [4], 0, fp3=[6])


def outs(fp0: int = 0) -> torch.Tensor:
    """Two steps of two sequences [M=2, B=2, X=11].
    step 0: seq 0 feeds one row (slot 3, label 5), seq 1 two (slots 4, 5, labels 7, 8); both propose.
    step 1: seq 0 is done (0 tokens left); seq 1 proposes, feeding nothing."""
    o = torch.full((2, 2, 11), -1, dtype=torch.long)
    o[0, 0, :6] = torch.tensor([3, -1, 5, 0, 2, 10])
    o[0, 1, :6] = torch.tensor([4, 5, 7, 8, 1, 20])
    o[1, 0, :6] = torch.tensor([-1, -1, 0, 0, 0, 11])
    o[1, 1, :6] = torch.tensor([-1, -1, 0, 0, 1, 21])
    o[..., 6:10] = fp0 + torch.arange(2 * 2 * 4).reshape(2, 2, 4)      # fps: m*8 + b*4 + (column - 6)
    o[..., 10] = torch.tensor([[1, 0], [1, 1]])
    return o


def test_lay_out_steps_orders_events_by_step_kind_sequence_column():
    got = lay_out_steps(outs(), (FEED, PROPOSE), doc_id=np.array([40, 41]), turn=np.array([3, 3]),
                        step=np.array([[5, 5], [-1, 6]]))
    rows = dict(zip(COLUMNS + ("m",), got))
    # step 0: feed (0, 0), feed (1, 0), feed (1, 1), propose 0, propose 1; step 1: propose 1
    np.testing.assert_array_equal(rows["m"], [0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(rows["seq"], [0, 1, 1, 0, 1, 1])
    np.testing.assert_array_equal(rows["doc_id"], [40, 41, 41, 40, 41, 41])
    np.testing.assert_array_equal(rows["turn"], [3] * 6)
    np.testing.assert_array_equal(rows["step"], [5, 5, 5, 5, 5, 6])
    np.testing.assert_array_equal(rows["kind"], [1, 1, 1, 3, 3, 3])            # EVENT_KINDS: feed 1, propose 3
    np.testing.assert_array_equal(rows["label"], [5, 7, 8, -1, -1, -1])
    np.testing.assert_array_equal(rows["key"], [4, 6, 7, -1, -1, -1])
    np.testing.assert_array_equal(rows["rope"], [-1] * 6)
    np.testing.assert_array_equal(rows["slot"], [3, 4, 5, -1, -1, -1])
    np.testing.assert_array_equal(rows["position"], [-1, -1, -1, 10, 20, 21])
    np.testing.assert_array_equal(rows["fp"], [2, 6, 7, 0, 4, 12])
    np.testing.assert_array_equal(rows["fp2"], [0, 0, 0, 1, 5, 13])
    np.testing.assert_array_equal(rows["fp2_valid"], [0, 0, 0, 1, 0, 1])


def test_the_table_numbers_runs_of_steps_between_the_other_batches():
    log = EventLog(lambda rows: torch.zeros(len(rows), dtype=torch.long))
    doc = np.array([40, 41])
    log.add("context", doc_id=doc, turn=0, step=-1, seq=np.array([0, 1]), key=np.array([3, 4]), fp=np.array([7, 8]))
    log.add_steps(0, doc, np.array([[0, 0], [-1, 1]]), outs(), (FEED, PROPOSE))
    log.add("ring_write", doc_id=doc[[1]], turn=0, step=2, seq=np.array([1]), label=9, fp=[6], fp2=[5])
    log.add_steps(1, doc, np.array([[0, 0], [-1, 1]]), outs(1000), (FEED, PROPOSE))   # laid out with the first
    t = log.table().to_pandas()
    assert list(t["order"]) == list(range(2 + 6 + 1 + 6))
    assert list(t["kind"]) == (["context"] * 2 + ["feed"] * 3 + ["propose"] * 3 + ["ring_write"]
                               + ["feed"] * 3 + ["propose"] * 3)
    assert list(t["doc_id"]) == [40, 41, 40, 41, 41, 40, 41, 41, 41, 40, 41, 41, 40, 41, 41]
    assert list(t["step"]) == [-1, -1, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 1]
    assert list(t["turn"]) == [0] * 9 + [1] * 6
    assert list(t["fp"]) == [7, 8, 2, 6, 7, 0, 4, 12, 6, 1002, 1006, 1007, 1000, 1004, 1012]
    assert t["fp2"].isna().tolist() == ([True] * 5 + [False, True, False] + [False]
                                        + [True] * 3 + [False, True, False])
    assert list(t["fp2"].dropna()) == [1, 13, 5, 1001, 1013]

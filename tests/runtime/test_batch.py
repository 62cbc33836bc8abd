"""runtime/batch.py: ragged windows and runs as the loop's flat index arrays. Literal cases."""
import numpy as np

from atlas_ab.runtime.batch import ragged_runs, ragged_window


def test_ragged_runs_number_each_sequences_items_in_order():
    seq, j = ragged_runs([2, 0, 3, 1])
    assert seq.tolist() == [0, 0, 2, 2, 2, 3] and j.tolist() == [0, 1, 0, 1, 2, 0]
    seq, j = ragged_runs(np.array([0, 0]))
    assert seq.tolist() == [] and j.tolist() == []


def test_ragged_window_pads_each_sequences_window():
    history = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    tok, pos, slots, length = ragged_window(history, np.array([1, 0]), np.array([2, 3]))
    assert tok.tolist() == [[2, 3, 0], [5, 6, 7]]
    assert pos.tolist() == [[1, 2, 3], [0, 1, 2]]
    assert slots.tolist() == [[1, 2, -1], [0, 1, 2]] and length == 3

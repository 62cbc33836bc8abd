"""DRAFT_CONF economics against hand-computed values."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis import synth
from atlas_ab.analysis.economics import confidence_bins, economics, throughput, throughput_difference
from atlas_ab.analysis.load import load_run


def _timed_run(root, arm, steps, mode="live", batch_width=1):
    root = synth.write_run(root, steps, arm)
    m = json.loads((root / "manifest.json").read_text())
    m.update(mode=mode, waves={"total": 1, "batch_width": batch_width}, levers={"num_drafts": 2})
    (root / "manifest.json").write_text(json.dumps(m))
    return load_run(root)


def _steps(n_docs=12, per_doc=50, ms_spec=2.0, ms_serial=1.0, gate_below=0.0, seed=0):
    """Steps whose chain confidence c is uniform; accept_len 2 when c > 0.6, 1 when c > 0.3, else 0;
    a gated step (c < gate_below) is serial (k = 0) and commits one token."""
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    c = rng.random(n).astype(np.float32)
    a = np.where(c > 0.6, 2, np.where(c > 0.3, 1, 0))
    gated = c < gate_below
    k = np.where(gated, 0, 2)
    a = np.where(gated, 0, a)
    return pd.DataFrame({
        "doc_id": np.repeat(np.arange(n_docs), per_doc), "turn": 0, "step": np.tile(np.arange(per_doc), n_docs),
        "k": k.astype(np.int32), "accept_len": a.astype(np.int32),
        "step_ms": np.where(gated, ms_serial, ms_spec).astype(np.float32),
        "committed": [[1] * int(x) for x in np.where(gated, 1, 1 + a)],
        "conf": [[float(x), float(x) + 0.01] for x in c]})


def test_throughput_is_a_clustered_ratio(tmp_path):
    s = _steps()
    r = _timed_run(tmp_path / "r", "a", s)
    t = throughput(r)
    per = s.assign(tok=s["committed"].map(len), sec=s["step_ms"] / 1e3).groupby("doc_id")[["tok", "sec"]].sum()
    R = per["tok"].sum() / per["sec"].sum()
    G = len(per)
    sd = math.sqrt(G / (G - 1) * ((per["tok"] - R * per["sec"]) ** 2).sum()) / per["sec"].sum()
    assert t.value == pytest.approx(R) and t.sd == pytest.approx(sd)


def test_throughput_needs_live_timings_of_one_sequence(tmp_path):
    with pytest.raises(AtlasError, match="replay run carries no step times"):
        throughput(_timed_run(tmp_path / "r", "a", _steps(), mode="replay"))
    with pytest.raises(AtlasError, match="batch width 16"):
        throughput(_timed_run(tmp_path / "b", "a", _steps(), batch_width=16))


def test_break_even_and_tau_star(tmp_path):
    # verify 2 ms, serial 1 ms: break-even E[1 + a] >= 2. The bins above 0.6 give 3 tokens, (0.3, 0.6]
    # gives 2 (pays, just), below 0.3 gives 1: tau* = 0.3 (bin edges of 0.1).
    ungated = _timed_run(tmp_path / "u", "draft_conf_000", _steps())
    gated = _timed_run(tmp_path / "g", "draft_conf_050", _steps(gate_below=0.5, seed=1))
    e = economics(ungated, [gated])
    assert (e.c_spec_ms, e.c_serial_ms, e.break_even) == (2.0, 1.0, 2.0)
    assert e.tau_star == pytest.approx(0.3)
    b = confidence_bins(ungated, 2.0)
    assert list(b["pays"]) == [False, False, False, True, True, True, True, True, True, True]
    d = throughput_difference(ungated, gated)
    assert d.delta == pytest.approx(throughput(gated).value - throughput(ungated).value)
    assert d.sd is not None and d.sd > 0

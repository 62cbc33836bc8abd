"""Print confseq's hedged-capital CS on the literal inputs of tests/analysis/test_confidence_sequence.py
(the expected values there were pasted from this script's output).

    git clone https://github.com/gostevehoward/confseq   # commit 70b1ef3; its betting code is pure Python
    python scripts/confseq_literals.py confseq/src

Only confseq's pure-Python modules are imported (its C++ extension needs Boost and is not used);
`multiprocess` (parallel grids only) is stubbed, and numpy 2 gets back the alias np.float_.
"""
import sys
import types

import numpy as np

np.float_ = np.float64
sys.modules.setdefault("multiprocess", types.ModuleType("multiprocess"))
sys.modules.setdefault("matplotlib", types.ModuleType("matplotlib"))
sys.modules.setdefault("matplotlib.pyplot", types.ModuleType("matplotlib.pyplot"))
sys.path.insert(0, sys.argv[1])

from confseq.betting import hedged_cs  # noqa: E402

INPUTS = {
    "x10": ([0.2, 0.9, 0.4, 0.6, 0.5, 0.7, 0.1, 0.8, 0.3, 0.6], 0.05, 1000),
    "x20_seed0": (np.round(np.random.default_rng(0).beta(6, 4, 20), 3).tolist(), 0.1, 500),
}
for name, (x, alpha, breaks) in INPUTS.items():
    lo, hi = hedged_cs(np.asarray(x), alpha=alpha, breaks=breaks, running_intersection=True)
    print(name, "x =", x)
    print(name, "lower =", [round(float(v), 6) for v in lo])
    print(name, "upper =", [round(float(v), 6) for v in hi])

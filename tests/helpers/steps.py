"""Comparing two steps tables as far as their computations guarantee.

Discrete outcomes (tokens, drafts, accept lengths, positions, rows kept, gating) are equal across
thread counts, batch widths, and live vs replay; the drafter's floats (`conf`, `topk_probs`) only
to rounding: a GEMM's sums split by thread count and by shape, and CPUs of other vector widths
(AVX2 vs AVX-512) round those sums differently.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

#: |a - b| the drafter's fp32 probabilities keep between two computations of other shapes or threads
FLOAT_ATOL = 1e-5


def float_columns(table: pd.DataFrame | pa.Table) -> list[str]:
    """Columns of floats or (nested) lists of floats: SHADOW_TOPK's topk_probs is a list of lists."""
    schema = table.schema if isinstance(table, pa.Table) else pa.Schema.from_pandas(table, preserve_index=False)
    out = []
    for f in schema:
        t = f.type
        while pa.types.is_list(t):
            t = t.value_type
        if pa.types.is_floating(t):
            out.append(f.name)
    return out


def _shape_and_values(v) -> tuple:
    """A (nested) list of floats as (its nesting of lengths, its values flattened in order)."""
    if isinstance(v, (list, np.ndarray)):
        parts = [_shape_and_values(x) for x in v]
        return (len(parts), tuple(p[0] for p in parts)), [y for p in parts for y in p[1]]
    return (), [v]


def _frame(table) -> pd.DataFrame:
    return table.to_pandas() if isinstance(table, pa.Table) else table.reset_index(drop=True)


def assert_steps_match(a, b, atol: float = FLOAT_ATOL, skip=("step_ms",)) -> None:
    """Every discrete column equal; every float column within `atol` (nulls in the same places)."""
    a, b = _frame(a), _frame(b)
    assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0
    floats = [c for c in float_columns(a) if c not in skip]
    exact = [c for c in a.columns if c not in floats and c not in skip]
    pd.testing.assert_frame_equal(a[exact], b[exact])
    for c in floats:
        na, nb = a[c].isna(), b[c].isna()
        assert (na == nb).all(), f"{c}: nulls differ"
        sx, sy = (list(map(_shape_and_values, col[~n])) for col, n in ((a[c], na), (b[c], nb)))
        assert [s for s, _ in sx] == [s for s, _ in sy], f"{c}: lengths differ"
        x = np.asarray([v for _, vs in sx for v in vs], dtype=np.float64)
        y = np.asarray([v for _, vs in sy for v in vs], dtype=np.float64)
        assert np.allclose(x, y, rtol=0, atol=atol, equal_nan=True), (c, float(np.nanmax(np.abs(x - y))))


def other_rounding(table, rel: float = 2.0 ** -20):
    """`table` with every float nudged by ~8 fp32 ulps: what another CPU's or thread count's
    rounding does (the drafter's `conf` moved in its 7th digit between 1 and 2 threads on an AVX2 CPU)."""
    df = _frame(table).copy()
    for c in float_columns(df):
        df[c] = df[c].map(lambda v: v if v is None or (np.isscalar(v) and v != v) else np.asarray(v) * (1 + rel))
    return df


def lossy_variants(table):
    """(name, table) for each lossy change a comparison must catch: a dropped accepted token, a
    wrong draft, a lost step."""
    df = _frame(table)
    i = int(np.flatnonzero(df.accept_len.to_numpy() > 0)[0])
    dropped = df.copy()
    dropped.loc[i, "accept_len"] -= 1
    wrong = df.copy()
    wrong.at[i, "drafts"] = [int(d) + 1 for d in df.drafts[i]]
    return [("a dropped accepted token", dropped), ("a wrong draft", wrong),
            ("a lost step", df.drop(index=i).reset_index(drop=True))]

"""The two drafter row-space conventions of the reference engine, as pure rules.

A drafter row is a pair key k = (embedding of the token at position k+1,
target-or-drafter hidden of position k). A propose at position n (the position
of the last committed token) writes K rows, pair keys n-1 .. n+K-2: row 0 pairs
the committed token with the target's verified hidden, rows 1.. pair a draft
with the drafter's own hidden (the handoff).

compact (Qwen-style MtpHead): rows exist only for what was drafted; the RoPE
  position of key k is k+1 (ring label == RoPE == key+1). after_verify trims
  drafted - accepted rows, so row 0 goes when nothing is accepted.
dense (GLM-5.3 head): slot == pair key == RoPE position while aligned. Row 0
  of a propose is always valid and never trimmed: it pairs two facts known at
  propose time, so only rows 1.. depend on a draft being accepted.

REFEED additionally drops the kept rows that carry a drafter hidden, so the
next catch-up rebuilds them from the ring with the target's hidden. In the
compact space that is `accepted - 1` rows (the reference engine's rule); in the dense space
it is every kept row past row 0 (min(accepted, K-1)), the same rule stated for
a space that also keeps the row of the last accepted draft.
"""
from __future__ import annotations

import functools

import numpy as np

from atlas_ab.telemetry.schema import ROW_SPACES


@functools.lru_cache(maxsize=None)
def trim_table(row_space: str, drafted: int, refeed: bool) -> np.ndarray:
    """`rows_to_trim` for accepted = 0..drafted, as an int64 array [drafted+1] (read-only: cached,
    since the host books a verify with it every step)."""
    table = np.array([rows_to_trim(row_space, drafted, a, refeed) for a in range(drafted + 1)], dtype=np.int64)
    table.flags.writeable = False
    return table


def rows_to_trim(row_space: str, drafted: int, accepted: int, refeed: bool) -> int:
    """Rows to drop from the end of the drafter's KV after a verify."""
    if not 0 <= accepted <= drafted:
        raise ValueError(f"accepted={accepted} outside [0, drafted={drafted}]")
    if row_space == "compact":
        trim = drafted - accepted
        if refeed and accepted >= 1:
            trim += accepted - 1          # accepted rows 1..a-1 hold a drafter hidden
    elif row_space == "dense":
        keep = min(drafted, accepted + 1)  # row 0 always, then one per accepted draft
        trim = drafted - keep
        if refeed:
            trim += keep - 1              # every kept row past row 0 holds a drafter hidden
    else:
        raise ValueError(f"unknown row_space {row_space!r} (one of {', '.join(ROW_SPACES)})")
    return min(trim, drafted)


def rope_of(row_space: str, key, slot):
    """RoPE position of a drafter row (ints or equal-shape arrays): key + 1 in the compact
    space (ring label == RoPE == key + 1), the slot in the dense one. The drafter writes its
    rows by it and the fingerprint table checks every feed against it."""
    return key + 1 if row_space == "compact" else slot

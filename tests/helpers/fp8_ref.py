"""E4M3 rounding written from the format's definition, independent of torch's cast (tests of runtime/fp8.py)."""
import itertools

import numpy as np

E4M3_MAX = 448.0


def e4m3_grid() -> np.ndarray:
    """Every finite non-negative E4M3 value from its bit fields (bias 7; exponent field 0: subnormals m/8 x 2^-6;
    S.1111.111 is NaN, so the largest is 1.75 x 2^8 = 448), ascending."""
    vals = []
    for e, m in itertools.product(range(16), range(8)):
        if (e, m) == (15, 7):
            continue
        vals.append(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(sorted(vals))


def round_e4m3(x: np.ndarray) -> np.ndarray:
    """Round to nearest E4M3, ties to the even mantissa (the last bit of the grid index), saturating at 448."""
    grid = e4m3_grid()
    a = np.minimum(np.abs(x), E4M3_MAX)
    i = np.clip(np.searchsorted(grid, a), 1, len(grid) - 1)
    lo, hi = grid[i - 1], grid[i]
    up = (a - lo > hi - a) | ((a - lo == hi - a) & ((i - 1) % 2 == 1))
    return np.sign(x) * np.where(up, hi, lo)

"""One unit of engine telemetry (a request, or a global counter delta) and what follows from it.

Parsers fill `Unit`s with what the source printed, nothing derived by assumption; the
counts every metric needs are then derived here, each only where the unit's fields
determine it:

  a_ge(i)  #(accept_len >= i)   from per-step arrays, a histogram, or accepted-per-depth
  k_ge(i)  #(k >= i)            from per-step arrays, drafted-per-depth, or a fixed k
  joint    (k, accept_len) per step: per-step arrays, or any of the above with k fixed

A verify step may carry no draft at all: vLLM records a step whose drafts structured-output
grammar invalidated as k = 0 ("a k = 0 row means a verification step had no valid drafts left
after adjustment"; vllm/v1/core/sched/scheduler.py subtracts `num_invalid_spec_tokens` before
`observe_draft`). Such steps are not in any denominator (our k = 0 rows are not either), so
`n_steps` counts steps with k >= 1 and `zero_steps` the others; where a source counts both
together and does not say how many had no draft, `n_steps` is None, `n_recorded` holds the
sum and `zero_max` how many of them can have been empty.

Fields a reader saw and does not use are named in `ignored` (field -> why); unknown ones are
not fatal (one warning, `telemetry.ignored` in the manifest) unless --strict.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from atlas_ab import AtlasError

#: why an unknown field was not read (the warning and --strict single these out)
UNKNOWN = "unknown to this reader"


@dataclass(frozen=True)
class Where:
    """Names the place a value came from in every error: file, request, field."""

    file: str
    request: str = ""

    def at(self, request) -> "Where":
        return Where(self.file, str(request))

    def error(self, msg: str, field_name: str | None = None) -> AtlasError:
        where = self.file + (f": request {self.request}" if self.request else "")
        return AtlasError(f"{where}: " + (f"field {field_name!r}: " if field_name else "") + msg)

    def count(self, value, name: str, allow_none: bool = False) -> int | None:
        """A non-negative integer field (JSON numbers like 3.0 are accepted, 3.5 is not)."""
        if value is None:
            if allow_none:
                return None
            raise self.error("missing", name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                (isinstance(value, float) and (not math.isfinite(value) or value != int(value))):
            raise self.error(f"expected a non-negative integer, got {value!r}", name)
        if value < 0:
            raise self.error(f"negative ({value})", name)
        return int(value)

    def counts(self, values, name: str) -> list[int]:
        if not isinstance(values, list):
            raise self.error(f"expected a list, got {type(values).__name__}", name)
        return [self.count(v, f"{name}[{i}]") for i, v in enumerate(values)]


@dataclass
class Unit:
    """What one request (or one global counter delta) reported. None = not reported."""

    where: Where
    unit: str                          # the request's id as the source names it, or "global"
    doc_id: int | None = None          # carried client-side (engines do not know it)
    turn: int | None = None
    n_steps: int | None = None         # verify steps that carried >= 1 draft (None: not determined)
    zero_steps: int | None = 0         # recorded steps that carried no draft (k = 0); None: not determined
    n_recorded: int | None = None      # steps the source counted when that count may hold k = 0 ones
    zero_max: int = 0                  # with zero_steps None: at most this many were empty
    draft_tokens: int | None = None    # sum of k
    accepted_tokens: int | None = None  # sum of accept_len
    k_max: int | None = None           # the configured k (num_speculative_tokens)
    k_fixed: int | None = None         # k of every step, when the source establishes it
    hist: list[int] | None = None      # hist[j] = steps that accepted exactly j drafts
    drafted: list[int] | None = None   # drafted[i-1] = #(k >= i)
    accepted: list[int] | None = None  # accepted[i-1] = #(accept_len >= i)
    steps_k: list[int] | None = None   # per step, in order
    steps_a: list[int] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    extra: dict = field(default_factory=dict)
    ignored: dict = field(default_factory=dict)  # field -> why it was not read (UNKNOWN: not known here)

    # -- derived ---------------------------------------------------------------------------
    @property
    def has_steps(self) -> bool:
        return self.steps_k is not None

    @property
    def K(self) -> int | None:
        """The deepest depth this unit can have drafted."""
        if self.steps_k is not None:
            return max(self.steps_k, default=0)
        if self.k_fixed is not None:
            return self.k_fixed
        if self.drafted is not None:
            return len(self.drafted)
        return self.k_max

    def a_ge(self, i: int) -> int | None:
        if self.steps_a is not None:
            return sum(a >= i for a in self.steps_a)
        if self.hist is not None:
            return sum(self.hist[i:]) if i >= 0 else None
        if self.accepted is not None:
            if i == 0:
                return self.n_steps
            return self.accepted[i - 1] if i <= len(self.accepted) else 0
        return None

    def k_ge(self, i: int) -> int | None:
        if i == 1 and self.n_steps is not None:
            return self.n_steps  # a verify step drafted >= 1 token: engines count no other
        if self.steps_k is not None:
            return sum(k >= i for k in self.steps_k)
        if self.k_fixed is not None and self.n_steps is not None:
            return self.n_steps if i <= self.k_fixed else 0
        if self.drafted is not None:
            return self.drafted[i - 1] if i <= len(self.drafted) else 0
        return None

    @property
    def joint_known(self) -> bool:
        """The (k, accept_len) count of every step follows from what the unit reported."""
        return self.has_steps or (self.k_fixed is not None and self.n_steps is not None
                                  and self.a_ge(1) is not None)

    def histogram(self) -> list[int] | None:
        """hist[j] = verify steps (k >= 1) with accept_len == j, whichever way the unit reported it."""
        if self.steps_a is not None:
            acc = [a for k, a in zip(self.steps_k, self.steps_a) if k >= 1]
            top = max(acc, default=0)
            return [sum(a == j for a in acc) for j in range(top + 1)]
        if self.zero_steps is None:
            return None  # hist[0] may hold steps without a draft: not the verify steps' histogram
        if self.hist is not None:
            return list(self.hist)
        if self.accepted is not None and self.n_steps is not None:
            ge = [self.n_steps] + list(self.accepted) + [0]
            return [ge[j] - ge[j + 1] for j in range(len(ge) - 1)]
        return None

    def joint_steps(self) -> tuple[list[int], list[int]]:
        """(k, accept_len) per step: in order for per-step units, else in histogram order."""
        if self.has_steps:
            return list(self.steps_k), list(self.steps_a)
        h = self.histogram()
        a = [j for j, c in enumerate(h) for _ in range(c)]
        return [self.k_fixed] * len(a), a


def check_unit(u: Unit) -> Unit:
    """Consistency of what one unit reported (each failure names the file, request and field)."""
    w = u.where
    if u.steps_k is not None:
        if len(u.steps_k) != len(u.steps_a):
            raise w.error(f"per-step arrays differ in length ({len(u.steps_k)} drafted, "
                          f"{len(u.steps_a)} accepted)")
        for s, (k, a) in enumerate(zip(u.steps_k, u.steps_a)):
            if a > k:
                raise w.error(f"step {s} accepted {a} of {k} drafts", "per_step_accepted")
            if u.k_max is not None and k > u.k_max:
                raise w.error(f"step {s} drafted {k} > num_spec_tokens {u.k_max}", "per_step_drafted")
        recorded = u.n_steps if u.n_recorded is None else u.n_recorded
        if recorded is not None and recorded != len(u.steps_k):
            raise w.error(f"{recorded} steps reported, {len(u.steps_k)} per-step entries", "num_spec_steps")
        if u.draft_tokens is not None and u.draft_tokens != sum(u.steps_k):
            raise w.error(f"{u.draft_tokens} != sum of per_step_drafted {sum(u.steps_k)}", "num_draft_tokens")
        if u.accepted_tokens is not None and u.accepted_tokens != sum(u.steps_a):
            raise w.error(f"{u.accepted_tokens} != sum of per_step_accepted {sum(u.steps_a)}",
                          "num_accepted_draft_tokens")
    if u.hist is not None:
        n, acc = sum(u.hist), sum(j * c for j, c in enumerate(u.hist))
        recorded = u.n_steps if u.n_recorded is None else u.n_recorded
        if recorded is not None and n != recorded:
            raise w.error(f"sums to {n} steps, the source reports {recorded}", u.extra.get("hist_field", "histogram"))
        if u.accepted_tokens is not None and acc != u.accepted_tokens:
            raise w.error(f"accounts for {acc} accepted drafts, the source reports {u.accepted_tokens}",
                          u.extra.get("hist_field", "histogram"))
        every = [sum(a == j for a in u.steps_a) for j in range(len(u.hist))] if u.steps_a is not None else None
        if every is not None and (u.hist != every or len(u.steps_a) != n):
            raise w.error("does not match the per-step arrays", u.extra.get("hist_field", "histogram"))
        top = max((j for j, c in enumerate(u.hist) if c), default=0)
        if u.k_max is not None and top > u.k_max:
            raise w.error(f"has steps accepting {top} > num_spec_tokens {u.k_max}",
                          u.extra.get("hist_field", "histogram"))
    for name, seq in (("drafted", u.drafted), ("accepted", u.accepted)):
        if seq is not None and any(seq[i] < seq[i + 1] for i in range(len(seq) - 1)):
            raise w.error(f"per-depth {name} counts rise with depth {seq} (verification accepts a prefix)",
                          u.extra.get("depth_field", name))
    if u.drafted is not None and u.accepted is not None:
        for i, (d, a) in enumerate(zip(u.drafted, u.accepted + [0] * len(u.drafted)), 1):
            if a > d:
                raise w.error(f"depth {i} accepted {a} > drafted {d}", u.extra.get("depth_field", "by depth"))
    if u.draft_tokens is not None and u.accepted_tokens is not None and u.accepted_tokens > u.draft_tokens:
        raise w.error(f"{u.accepted_tokens} accepted > {u.draft_tokens} drafted", "accepted")
    return u


def fixed_k(u: Unit) -> int | None:
    """k of every step, where the unit's own numbers establish it (never assumed):
    per-step arrays all equal; drafted tokens == steps x configured k; or drafted per depth
    equal at every depth."""
    if u.steps_k is not None:
        ks = set(u.steps_k)
        return ks.pop() if len(ks) == 1 else None
    if u.n_steps and u.draft_tokens is not None and u.k_max and u.draft_tokens == u.n_steps * u.k_max:
        return u.k_max
    if u.drafted and u.n_steps and all(d == u.n_steps for d in u.drafted):
        return len(u.drafted)
    return None

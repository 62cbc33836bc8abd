"""What an engine's telemetry can and cannot give: the grain, and its home in the manifest.

Every metric of the analysis (docs/telemetry.md) is a function of the joint count of
(k, accept_len) per verify step. Engines report less than that, at three grains:

  steps     one (k, accept_len) per verify step, in order (vLLM `detailed`, our runs):
            everything, and each step's position when the prompt length is known.
  requests  per-request totals: a histogram of accept_len, drafted/accepted per depth,
            or only token totals. The joint is known when k was fixed (the source says
            so: drafted = steps x k), and then the request's steps can be written as step
            rows (the order of steps within a request does not enter any rate).
  counters  global counters (Prometheus, logs): no requests, no documents.

`Telemetry` is what the manifest records under "telemetry"; the analysis reads it to
refuse what the grain cannot give (with the reason) instead of printing a number.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from atlas_ab import AtlasError

GRAINS = ("steps", "requests", "counters", "events")

#: The figures a run can or cannot give, by name (manifest telemetry.exact / not_available).
FIGURES = {
    "p_i": "p_i = #(accept_len >= i) / #(k >= i) at every depth",
    "p_i_cond": "p_i_cond = #(accept_len >= i) / #(accept_len >= i-1 and k >= i)",
    "tokens_per_step": "mean of 1 + accept_len over verify steps",
    "draft_acceptance_rate": "accepted draft tokens / drafted tokens",
    "histogram": "acceptance-length histogram",
    "cluster_sd": "document-clustered sd and bootstrap",
    "by_turn": "figures per turn and turn class",
    "position_pairing": "steps of two runs paired on (doc_id, turn, position): mcnemar RUN_A RUN_B",
    "request_pairing": "requests of two runs paired on (doc_id, turn)",
    "n_serial": "decode steps without drafts",
    "step_order": "the order of steps within a request",
    "fingerprints": "the REFEED fingerprint table (events)",
}


@dataclass(frozen=True)
class Telemetry:
    """The manifest's `telemetry` section: where the data came from and what it can give."""

    source: str                      # vllm | sglang | trtllm | llamacpp | prometheus | atlas-log
    format: str                      # the source's own name for what was read
    grain: str                       # steps | requests | counters | events
    tables: tuple[str, ...]          # what the run directory holds: steps, counts, events
    clusters: str | None             # doc_id (carried by the client) | request | None
    exact: tuple[str, ...]
    not_available: dict[str, str]    # figure -> why not
    notes: tuple[str, ...] = field(default=())
    ignored: dict[str, str] = field(default_factory=dict)   # field or metric name -> why it was not read

    def __post_init__(self):
        if self.grain not in GRAINS:
            raise ValueError(f"unknown grain {self.grain!r}")

    def why_not(self, figure: str) -> str | None:
        return self.not_available.get(figure)

    @property
    def has_steps(self) -> bool:
        return "steps" in self.tables

    def summary(self) -> str:
        lines = [f"telemetry: {self.source} ({self.format}), grain {self.grain}; tables "
                 f"{', '.join(self.tables)}; clusters {self.clusters or 'none'}",
                 "  exact: " + (", ".join(self.exact) or "nothing")]
        lines += [f"  not available: {k}: {v}" for k, v in self.not_available.items()]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  ignored: {k}: {v}" for k, v in self.ignored.items()]
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict:
        return {"source": self.source, "format": self.format, "grain": self.grain,
                "tables": list(self.tables), "clusters": self.clusters, "exact": list(self.exact),
                "not_available": dict(self.not_available), "notes": list(self.notes), "ignored": dict(self.ignored)}

    @classmethod
    def from_dict(cls, d: dict, where: str = "manifest.json") -> "Telemetry":
        try:
            return cls(source=str(d["source"]), format=str(d.get("format", "")), grain=str(d["grain"]),
                       tables=tuple(d.get("tables") or ()), clusters=d.get("clusters"),
                       exact=tuple(d.get("exact") or ()), not_available=dict(d.get("not_available") or {}),
                       notes=tuple(d.get("notes") or ()), ignored=dict(d.get("ignored") or {}))
        except (KeyError, TypeError, ValueError) as e:
            raise AtlasError(f"{where}: malformed telemetry section ({e.__class__.__name__}: {e})") from None


def from_manifest(manifest: dict | None, where: str = "manifest.json") -> Telemetry | None:
    """The run's telemetry section; None for our own runs (they have every figure)."""
    t = (manifest or {}).get("telemetry")
    return None if t is None else Telemetry.from_dict(t, where)


def no_steps_line(root, t: Telemetry) -> str:
    """Why a run without a step table cannot be read by the step analysis, and what can read it."""
    why = t.why_not("p_i_cond") or t.why_not("p_i") or "the source gives no per-step counts"
    if t.grain == "events":
        return (f"{root}: {t.source} telemetry holds fingerprint events only ({t.format}); "
                f"`fingerprints RUN` reads it")
    return (f"{root}: {t.source} telemetry at grain '{t.grain}' has no step table ({why}); "
            f"`report` and `pairs` give what it makes exact")

"""Timing-only runs (a DRAFTER_SKIP arm: its drafts are not the drafter's): their steps time a propose
and nothing else, so no verb that judges acceptance takes one."""
from __future__ import annotations

from atlas_ab import AtlasError


def refuse_timing_only(runs, verb: str) -> None:
    """One line naming the first run whose manifest marks it timing-only, and why."""
    for r in runs:
        why = (r.manifest or {}).get("timing_only")
        if why:
            raise AtlasError(f"{verb}: {r.path} is a timing-only run ({why}): its acceptance means nothing; "
                             "it times a propose, it is not judged")

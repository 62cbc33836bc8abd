"""The one timestamp every manifest records (a run's, an ingested run's, a trajectory's): local
time with its UTC offset, to the second (`2026-12-02T07:10:40+00:00`)."""
from __future__ import annotations

import datetime as _dt


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")

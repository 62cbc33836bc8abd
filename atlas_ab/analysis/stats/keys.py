"""The keys of report.json (and of every result's to_dict): a data contract that outside checkers
read, older than the code's names. In code a standard error is `se` and the number of bootstrap
draws `n_boot`; in JSON they keep the keys `sd` and `B`. This is the one map from an attribute to
its key; results that write their keys out by hand use the same keys."""
from __future__ import annotations

JSON_KEY = {"se": "sd", "se_kind": "sd_kind", "cluster_se": "cluster_sd", "iid_se": "iid_sd",
            "relative_se": "relative_sd", "unpaired_iid_se": "unpaired_iid_sd",
            "unpaired_cluster_se": "unpaired_cluster_sd", "se_at_n": "sd_at_n", "n_boot": "B"}


def fields_dict(obj, skip: tuple[str, ...] = ()) -> dict:
    """A dataclass result's fields under their JSON keys."""
    return {JSON_KEY.get(k, k): getattr(obj, k) for k in obj.__dataclass_fields__ if k not in skip}

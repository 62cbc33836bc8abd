"""Pre-registrations as configuration: the types are the validation, and a text is identified by
its content (config/prereg.py)."""
import json
from pathlib import Path

import pytest

from atlas_ab import AtlasError
from atlas_ab.config.paths import PREREG_DIR
from atlas_ab.config.prereg import digest, load_prereg, lock, registrations

SHIPPED = sorted(PREREG_DIR.glob("*.yaml"))
BASE = {"hypothesis": "h", "primary_metric": "p1", "direction": "increase", "min_effect": 0.01,
        "threshold_sd": 3.0, "decides": "paired", "arms": {"control": "a", "treatment": "b"}, "min_n_per_arm": 100}


def _write(tmp_path, doc, name="q.yaml") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_prereg_parses_and_states_its_estimand_and_minimum(path):
    pr = load_prereg(path)
    assert pr.spec.minimums() and pr.sha256 == digest(path.read_bytes())
    if pr.kind != "oracle":
        assert "estimand:" in path.read_text() and pr.spec.estimand.value in pr.criterion().replace(" ", "_")


@pytest.mark.parametrize("change,needle", [
    ({"threshold_sd": float("nan")}, "threshold_sd: must be a finite number > 0, got nan"),
    ({"min_effect": float("inf")}, "min_effect: must be a finite number > 0, got inf"),
    ({"min_n_per_arm": -5}, "min_n_per_arm: must be a whole number >= 1, got -5"),
    ({"min_n_per_arm": 10.7}, "min_n_per_arm: Value '10.7' of type 'float' could not be converted to Integer"),
    ({"threshold_sd": True}, "threshold_sd: Value 'True' of type 'bool' could not be converted to Float"),
    ({"threshold_sd": "three"}, "threshold_sd: Value 'three' of type 'str' could not be converted to Float"),
    ({"arms": {"control": "a", "treatment": "a"}}, "arms: control and treatment are the same arm 'a'"),
    ({"min_pairs": 0}, "min_pairs: must be a whole number >= 1, got 0"),
    ({"estimand": "whole_arm"}, "estimand: whole_arm is decided on a whole-arm sd"),
    ({"cluster": "file"}, "cluster: must be one of source_file, document, got 'file'"),
    ({"relative": True}, "relative: a relative difference is decided on a whole-arm binomial or cluster sd"),
    ({"arms": {"control": "a"}}, "missing field 'arms.treatment'"),
    ({"min_n_per_arm": None}, "min_n_per_arm: missing: register at least one of min_n_per_arm"),
])
def test_a_bad_value_is_one_line_naming_its_field(tmp_path, change, needle):
    with pytest.raises(AtlasError) as e:
        load_prereg(_write(tmp_path, {**BASE, **change}))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{tmp_path / 'q.yaml'}: ") and needle in msg, msg


def test_a_field_of_another_kind_is_unknown(tmp_path):
    with pytest.raises(AtlasError, match="unknown field 'margin' for a difference pre-registration"):
        load_prereg(_write(tmp_path, {**BASE, "margin": 0.1}))
    with pytest.raises(AtlasError, match="unknown field 'min_clusters'|min_clusters: the oracle probe"):
        load_prereg(_write(tmp_path, {"kind": "oracle", "hypothesis": "h", "threshold_sd": 3, "arm": "o",
                                      "min_share": 0.5, "min_clusters": 10}))


def test_the_criterion_line_says_what_each_registered_minimum_counts(tmp_path):
    pr = load_prereg(_write(tmp_path, {**BASE, "min_pairs": 2000, "min_clusters": 12}))
    c = pr.criterion()
    assert c.endswith(">= 100 steps per arm, >= 2,000 matched pairs, >= 12 source files")
    assert "decided on the paired sd clustered by source file; estimand: matched positions" in c
    doc = load_prereg(_write(tmp_path, {**BASE, "cluster": "document", "decides": "cluster"}))
    assert doc.spec.estimand.value == "whole_arm"        # the default follows the sd: whole-arm sds
    assert "decided on the cluster sd clustered by document; estimand: whole arm" in doc.criterion()


def _manifest(*entries) -> dict:
    return {"preregs": [{"path": str(p), "sha256": digest(p.read_bytes()), "text": p.read_text()} for p in entries]}


def test_a_text_is_locked_only_if_every_arm_it_names_holds_its_hash(tmp_path):
    p = _write(tmp_path, BASE)
    both = registrations({"a": _manifest(p), "b": _manifest(p)})
    assert [(r.prereg.sha256, r.status) for r in both] == [(digest(p.read_bytes()), "locked")]
    half = registrations({"a": _manifest(p), "b": None})          # b ran outside any study
    assert half[0].status == "unlocked" and "a locked it but b ran outside any study" in half[0].why
    assert registrations({"a": None, "b": None}, given=p)[0].status == "unlocked"


def test_arms_that_locked_different_texts_are_refused(tmp_path):
    p = _write(tmp_path, BASE, "one.yaml")
    q = _write(tmp_path, {**BASE, "threshold_sd": 1.0}, "two.yaml")    # another text, another file name
    with pytest.raises(AtlasError, match="different locked hashes"):
        registrations({"a": _manifest(p), "b": _manifest(q)})
    with pytest.raises(AtlasError, match="different locked hashes"):
        registrations({"a": _manifest(p), "b": _manifest(q)}, given=p)


def test_an_edited_copy_is_unlocked_under_a_new_name_and_changed_under_the_old(tmp_path):
    p = _write(tmp_path, BASE, "refeed.yaml")
    runs = {"a": _manifest(p), "b": _manifest(p)}
    edited = {**BASE, "min_n_per_arm": 10, "threshold_sd": 1.0}
    (tmp_path / "x").mkdir()
    (renamed,) = registrations(runs, given=_write(tmp_path / "x", edited, "edited.yaml"))
    assert renamed.status == "unlocked" and "no run of a, b locked this text" in renamed.why
    (changed,) = registrations(runs, given=_write(tmp_path / "x", edited, "refeed.yaml"))
    assert changed.status == "changed" and changed.locked.sha256 == digest(p.read_bytes())


def test_lock_copies_the_text_once_and_returns_its_hash(tmp_path):
    p = _write(tmp_path, BASE)
    first = lock(p, tmp_path / "sweep")
    p.write_text(p.read_text().replace("3.0", "1.0"))
    second = lock(p, tmp_path / "sweep")                     # a later job of the study: the first text wins
    assert first["sha256"] == second["sha256"] != second["source_sha256"] == digest(p.read_bytes())


# ---- sequential: blocks (issue 38) ---------------------------------------------------------

SEQ = {"alpha": 0.05, "look_every": 1, "look_unit": "wave", "max_waves": 10}


@pytest.mark.parametrize("change,needle", [
    ({"alpha": 0.0}, "sequential.alpha: must be in (0, 1), got 0.0"),
    ({"alpha": 1.0}, "sequential.alpha: must be in (0, 1), got 1.0"),
    ({"alpha": 1.5}, "sequential.alpha: must be in (0, 1), got 1.5"),
    ({"alpha": float("nan")}, "sequential.alpha: must be in (0, 1), got nan"),
    ({"alpha": "five percent"}, "sequential.alpha: Value 'five percent' of type 'str' could not be converted"),
    ({"max_waves": None}, "sequential.max_waves: missing: register the budget (max_waves or max_clusters)"),
    ({"max_clusters": 0}, "sequential.max_clusters: must be a whole number >= 1, got 0"),
    ({"look_every": 0}, "sequential.look_every: must be a whole number >= 1 of waves, got 0: a look finer than a "
                        "wave"),
    ({"look_every": 0.5}, "sequential.look_every: Value '0.5' of type 'float' could not be converted to Integer"),
    ({"look_unit": "step"}, "sequential.look_unit: Invalid value 'step', expected one of [wave, cluster]"),
    ({"method": "obrien_fleming"}, "sequential.method: must be one of hedged_capital, asymptotic"),
    ({"peek": True}, "unknown field 'sequential.peek' for a difference pre-registration"),
])
def test_a_bad_sequential_block_is_one_line_naming_its_field(tmp_path, change, needle):
    seq = {k: v for k, v in {**SEQ, **change}.items() if v is not None}
    with pytest.raises(AtlasError) as e:
        load_prereg(_write(tmp_path, {**BASE, "sequential": seq}))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{tmp_path / 'q.yaml'}: ") and needle in msg, msg


def test_a_sequential_block_parses_and_a_fixed_n_registration_has_none(tmp_path):
    pr = load_prereg(_write(tmp_path, {**BASE, "sequential": {**SEQ, "max_clusters": 50}}))
    s = pr.spec.sequential
    assert (s.alpha, s.look_every, s.look_unit.value, s.method, s.max_waves, s.max_clusters) == (
        0.05, 1, "wave", "hedged_capital", 10, 50)
    assert pr.criterion().endswith("; sequential (hedged_capital, alpha 0.05, a look every wave, at most 10 waves "
                                   "and 50 clusters)")
    fixed = load_prereg(_write(tmp_path, BASE, "f.yaml"))
    assert fixed.spec.sequential is None and "sequential" not in fixed.criterion()
    for path in SHIPPED:        # every shipped fixed-n registration: its criterion text is unchanged
        pr = load_prereg(path)
        if getattr(pr.spec, "sequential", None) is None:
            assert "sequential" not in pr.criterion()


def test_looks_finer_than_a_wave_are_refused_naming_the_field(tmp_path):
    pr = load_prereg(_write(tmp_path, {**BASE, "sequential": {**SEQ, "look_unit": "cluster", "look_every": 4}}))
    with pytest.raises(AtlasError) as e:
        pr.spec.sequential.check_wave(batch_width=16)
    assert str(e.value).startswith("sequential.look_every: a look every 4 clusters is finer than a wave of 16 "
                                   "documents") and "\n" not in str(e.value)
    pr.spec.sequential.check_wave(batch_width=4)                       # one wave per look: accepted
    pr.spec.sequential.check_wave(batch_width=16, docs_per_cluster=4)  # 4 files of 4 documents each: a wave


@pytest.mark.parametrize("doc,needle", [
    ({"relative": True, "decides": "cluster"}, "sequential: a sequential study judges an absolute difference"),
    ({"kind": "equivalence", "margin": 0.01}, "sequential: a sequential study judges a difference of an acceptance "
                                             "metric, not kind: equivalence"),
    ({"primary_metric": "tokens_per_second", "decides": "cluster"}, "sequential: a sequential study judges a "
                                                                    "difference of an acceptance metric, not "
                                                                    "tokens_per_second"),
])
def test_a_sequential_block_on_what_it_cannot_judge_is_refused(tmp_path, doc, needle):
    base = {k: v for k, v in BASE.items() if not (doc.get("kind") and k in ("direction", "min_effect"))}
    with pytest.raises(AtlasError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_prereg(_write(tmp_path, {**base, **doc, "sequential": SEQ}))


def test_a_text_parsed_once_gives_each_caller_its_own_spec(tmp_path):
    """A sweep loads each registration ~21 times an arm, so its parse is kept by (path, sha256): the
    same text gives equal specs that are not one object, and an edited text is parsed again."""
    p = _write(tmp_path, BASE)
    one, two = load_prereg(p), load_prereg(p)
    assert one == two and one.spec is not two.spec
    one.spec.min_effect = 0.5                                    # a caller's edit stays its own
    assert load_prereg(p).spec.min_effect == 0.01
    p.write_text(json.dumps({**BASE, "min_effect": 0.02}))
    assert load_prereg(p).spec.min_effect == 0.02


def test_an_error_still_names_its_field_after_the_whole_document_merge(tmp_path):
    """The happy path merges the document at once; a failure is merged again key by key to name it."""
    with pytest.raises(AtlasError, match=r"q.yaml: threshold_sd: "):
        load_prereg(_write(tmp_path, {**BASE, "threshold_sd": "three"}))
    with pytest.raises(AtlasError, match="unknown field 'extra' for a difference pre-registration"):
        load_prereg(_write(tmp_path, {**BASE, "extra": 1}, name="q2.yaml"))


TPS = {**BASE, "primary_metric": "tokens_per_second", "decides": "cluster", "relative": True, "replicates": 3}


@pytest.mark.parametrize("doc,needle", [
    ({"replicates": 0}, "replicates: must be a whole number >= 1, got 0"),
    ({"replicates": True}, "replicates: Value 'True' of type 'bool' could not be converted to Integer"),
    ({"relative": False}, "replicates: replicate runs decide a relative tokens_per_second difference "
                          "(relative: true), not an absolute one"),
    ({"primary_metric": "p1", "decides": "paired", "relative": False},
     "replicates: replicate runs decide a relative tokens_per_second difference (relative: true), not p1"),
])
def test_replicates_are_a_relative_tokens_per_second_field(tmp_path, doc, needle):
    with pytest.raises(AtlasError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_prereg(_write(tmp_path, {**TPS, **doc}))
    pr = load_prereg(_write(tmp_path, TPS, "ok.yaml"))
    assert pr.spec.replicates == 3 and "over >= 3 runs an arm, each its own process" in pr.spec.criterion()

"""A sequential study of two non-inferiority registrations (atlas_ab/study/sequential.py judging through
analysis/sequential/judge.py): each stops at the look whose confidence sequence clears -margin (MET) or
falls below it (NOT MET). The fake runner's FAKE_RUNNER_REFEED_LIFT makes refeed_on clearly better, so
refeed_on is non-inferior to catchup_on and catchup_on is shown worse than refeed_on."""
import json
import os

from atlas_ab.study.sequential import SequentialStudy
from tests.helpers import faults
from tests.helpers.compose import cfg_of

PREREG = """name: {name}
kind: noninferiority
hypothesis: {treatment} costs less than 0.01 in p2_uncond against {control}.
primary_metric: p2_uncond
direction: increase
margin: 0.01
threshold_sd: 1.6449
decides: cluster
estimand: whole_arm
cluster: document
arms: {{control: {control}, treatment: {treatment}}}
min_n_per_arm: 5000
sequential: {{alpha: 0.05, max_waves: 12}}
"""


def test_a_non_inferiority_stops_at_the_look_that_decides_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_RUNNER_REFEED_LIFT", "1")
    paths = []
    for name, control, treatment in (("ni_refeed", "catchup_on", "refeed_on"), ("ni_catchup", "refeed_on",
                                                                                  "catchup_on")):
        p = tmp_path / f"{name}.yaml"
        p.write_text(PREREG.format(name=name, control=control, treatment=treatment))
        paths.append(str(p))
    args = [*faults.FAKE, "+study=refeed_sequential", f"study.preregs=[{','.join(paths)}]", "workload.n_docs=48",
            "runner.batch_width=4"]
    cfgs = {a: cfg_of(*args, f"+arm={a}") for a in ("catchup_on", "refeed_on")}
    with open(os.devnull, "w") as out:
        m = SequentialStudy(cfgs, tmp_path / "study", out=out).run()
    met, worse = m["preregs"]["ni_refeed"], m["preregs"]["ni_catchup"]
    assert m["status"] == "decided" and (met["decision"], worse["decision"]) == ("MET", "NOT MET")
    for q in (met, worse):
        looks = q["looks"]
        assert q["decided_at"] == len(looks) and q["closed_at_wave"] == looks[-1]["waves"] < 12
        assert all(lk["decision"] == "UNDECIDED" for lk in looks[:-1])
        assert q["result"]["margin"] == 0.01 and q["result"]["min_effect"] == -0.01
    assert met["looks"][-1]["lower"] >= -0.01 and worse["looks"][-1]["upper"] < -0.01
    # the arms ran until the later of the two stops, and no further
    stop = max(met["closed_at_wave"], worse["closed_at_wave"])
    manifest = json.loads((tmp_path / "study" / "1_refeed_on" / "manifest.json").read_text())
    assert manifest["status"] == "stopped" and manifest["stopped"]["at_wave"] == stop

"""`report` on runs without a step table: the verdict where the grain has the registered sd,
one line naming why where it has not."""
import json
import math

from atlas_ab.analysis.__main__ import main
from atlas_ab.ingest import ingest
from tests.helpers.engine_fixtures import trtllm_entry, vllm_prom

ERR = "atlas_ab.analysis: error: "


def prereg(tmp, metric="p2_uncond", decides="binomial"):
    p = tmp / f"{metric}-{decides}.yaml"
    p.write_text(f"name: t\nhypothesis: x\nprimary_metric: {metric}\ndirection: increase\nmin_effect: 0.01\n"
                 f"threshold_sd: 2\ndecides: {decides}\narms: {{control: ctl, treatment: trt}}\nmin_n_per_arm: 100\n")
    return p


def one_error(capsys, argv, must):
    code = main([str(a) for a in argv])
    err = [l for l in capsys.readouterr().err.splitlines() if "warning" not in l]
    assert code == 2 and len(err) == 1 and err[0].startswith(ERR), err
    for m in must:
        assert m in err[0], err[0]


def test_counters_verdict_binomial_only(tmp_path, capsys):
    (tmp_path / "off.prom").write_text(vllm_prom(2000, 4000, 2500, [1500, 1000]))
    (tmp_path / "on.prom").write_text(vllm_prom(2000, 4000, 2700, [1550, 1150]))
    off = ingest("prometheus", [tmp_path / "off.prom"], tmp_path / "ctl").out
    on = ingest("prometheus", [tmp_path / "on.prom"], tmp_path / "trt").out
    assert main(["report", str(on), str(off), "--prereg", str(prereg(tmp_path)), "--out", str(tmp_path / "r"),
                 "--bootstrap", "100", "--evaluate-unlocked"]) == 0     # engine runs lock no pre-registration
    out = capsys.readouterr().out
    assert out.startswith("WARNING: UNLOCKED") and "\nMET" in out
    v = json.loads((tmp_path / "r" / "report.json").read_text())["verdicts"][0]
    se = math.hypot(math.sqrt(0.5 * 0.5 / 2000), math.sqrt(0.575 * 0.425 / 2000))
    assert v["delta"] == 0.575 - 0.5 and abs(v["sd"] - se) < 1e-12
    one_error(capsys, ["report", on, off, "--prereg", prereg(tmp_path, decides="cluster"), "--out", tmp_path / "r2",
                       "--evaluate-unlocked"],
              ["decides by the cluster sd", "global counters have no requests or documents"])


def test_token_totals_refuse_p2(tmp_path, capsys):
    for arm, acc in (("ctl", 1), ("trt", 2)):
        (tmp_path / f"{arm}.json").write_text(json.dumps([trtllm_entry(i, [3, 3], [acc, 0]) for i in range(4)]))
        ingest("trtllm", [tmp_path / f"{arm}.json"], tmp_path / arm)
    one_error(capsys, ["report", tmp_path / "ctl", tmp_path / "trt", "--prereg", prereg(tmp_path),
                       "--out", tmp_path / "r", "--evaluate-unlocked"],
              [str(tmp_path / "ctl"), "p2_uncond is not available", "token totals only"])


def test_turn_class_preregistration_refused_without_steps(tmp_path, capsys):
    # the report of runs without a step table judged every turn whatever `turns` said; now one line
    for arm, acc in (("ctl", 1), ("trt", 2)):
        (tmp_path / f"{arm}.json").write_text(json.dumps([trtllm_entry(i, [3, 3], [acc, 0]) for i in range(12)]))
        ingest("trtllm", [tmp_path / f"{arm}.json"], tmp_path / arm)
    p = prereg(tmp_path, metric="draft_acceptance_rate", decides="cluster")
    p.write_text(p.read_text() + "turns: cold\n")
    one_error(capsys, ["report", tmp_path / "ctl", tmp_path / "trt", "--prereg", p, "--out", tmp_path / "r",
                       "--evaluate-unlocked"],
              ["judges cold turns", "all turns only"])


def test_one_build_report_for_every_grain(tmp_path):
    """report.build_report renders runs without a step table itself: the exact figures, the
    verdict by the one judge, and each per-step section as a row saying why the grain lacks it."""
    from atlas_ab.analysis.report import build_report
    from atlas_ab.analysis.runs import load_run, load_units
    from tests.helpers.synth import simulate_steps, write_run

    (tmp_path / "off.prom").write_text(vllm_prom(2000, 4000, 2500, [1500, 1000]))
    (tmp_path / "on.prom").write_text(vllm_prom(2000, 4000, 2700, [1550, 1150]))
    runs = [load_units(ingest("prometheus", [tmp_path / f"{a}.prom"], tmp_path / arm).out)
            for a, arm in (("on", "trt"), ("off", "ctl"))]
    rep = build_report(runs, tmp_path / "r", prereg=prereg(tmp_path), n_boot=0, evaluate_unlocked=True)
    assert rep.verdict.status == "MET" and rep.judged[0].origin == "evaluated unlocked"
    arms = rep.data["arms"]
    assert (arms["ctl"]["figures"]["p1"]["value"], arms["trt"]["figures"]["p2_uncond"]["value"]) == (0.75, 0.575)
    c = rep.data["comparisons"][0]
    assert (c["control"], c["treatment"]) == ("ctl", "trt")          # the pre-registration's control leads
    assert c["headline"]["p2_uncond"]["delta"] == 0.575 - 0.5
    md = rep.path.read_text()
    for section in ("## Per depth", "## Acceptance-length histogram", "## Cold vs warm turns", "## By turn"):
        assert md.index(section) < md.index("## Definitions")
    assert "- ctl: not available from this grain (counters): global counters" in md    # by_turn's reason
    assert sorted(p.name for p in rep.path.parent.glob("*.png")) == ["difference.png"]
    # beside a run without a step table, a step run is read at the per-unit grain too
    step = load_run(write_run(tmp_path / "s", simulate_steps(400, n_docs=4, turns=2, seed=0), "steps_arm"))
    rep = build_report([step, runs[0]], tmp_path / "r2", n_boot=0)
    assert rep.data["runs"][0]["units"] == 8 and rep.data["runs"][0]["grain"] == "steps"

"""scripts/sequential_table.py: a sequential study's decisions beside the fixed-n verdicts (literal inputs)."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("sequential_table", ROOT / "scripts" / "sequential_table.py")
table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(table)


def look(i, docs, decision):
    return {"index": i, "n_clusters": docs, "documents": docs, "waves": i, "estimate": 0.05, "lower": 0.02,
            "upper": 0.08, "decision": decision}


def test_rows_put_each_question_beside_its_fixed_n_verdict(tmp_path):
    study = {"preregs": {
        "claims_seq_q3_refeed": {"decision": "MET", "decided_at": 2, "looks": [look(1, 16, "UNDECIDED"),
                                                                               look(2, 32, "MET")],
                                 "saving": {"steps_per_arm": {"catchup_on": 4000, "refeed_on": 3900},
                                            "fixed_n_per_arm": 20000}},
        "claims_seq_q6_ring_prefill": {"decision": "UNDERPOWERED", "decided_at": None,
                                       "looks": [look(1, 16, "UNDERPOWERED")],
                                       "saving": {"steps_per_arm": {"catchup_on": 2000, "ring_prefill_on": 2100},
                                                  "fixed_n_per_arm": 20000}}}}
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "study.json").write_text(json.dumps(study))
    fixed = {"verdicts": [{"name": "claims_q3_refeed", "status": "MET", "n_control": 25000, "n_treatment": 24000},
                          {"name": "claims_q6_ring_prefill", "status": "NOT MET", "n_control": 25000,
                           "n_treatment": 25000}]}
    (tmp_path / "f.json").write_text(json.dumps(fixed))
    rows = table.rows("default", tmp_path / "s", tmp_path / "f.json")
    q3, q6 = rows
    assert (q3["decision"], q3["look"], q3["documents"], q3["steps_per_arm"], q3["fixed_run_steps"]) == \
        ("MET", 2, 32, 4000, 25000)
    assert q3["saved_vs_fixed_run"] == 1 - 4000 / 25000 and q3["agree"] == "yes"
    assert q6["agree"] == "n/a (not both decided)" and q6["fixed_verdict"] == "NOT MET"
    md = table.markdown(rows)
    assert ("| default | claims_seq_q3_refeed | MET | look 2 (32 docs, 2 waves) | 4,000 | 25,000 | 84% | 20,000 | "
            "MET | yes |") in md
    # a `claims` report: the model whose label starts with the row's label, greedy
    claims = {"models": {"default (d=256)": {"questions": {"q3": {"verdict": fixed["verdicts"][0]}}},
                         "default (d=256), sampled at T=1": {"questions": {}}}}
    (tmp_path / "c.json").write_text(json.dumps(claims))
    assert table.rows("default", tmp_path / "s", tmp_path / "c.json")[0]["agree"] == "yes"

"""`collect --concurrency N`: N requests in flight, each answer recording the load it was sent at."""
import json

import pytest

from atlas_ab.collect.cli import main as collect
from tests.helpers.engine_fixtures import FakeEngine

SMALL = ["--workload", "tiny", "--set", "n_docs=5", "--set", "gen_tokens=30", "--no-progress"]


def test_concurrency_is_requests_in_flight_and_each_answer_says_its_level(tmp_path):
    # every answer after the greedy probe's two takes 0.3 s, so the first three requests overlap
    with FakeEngine("vllm", hang_after=2, hang_s=0.3) as fe:
        assert collect(["--url", fe.url, "--arm", "c3", "--out", str(tmp_path / "c3"), "--concurrency", "3",
                        *SMALL]) == 0
    raw = [json.loads(line) for line in (tmp_path / "c3" / "raw" / "responses.jsonl").read_text().splitlines()]
    levels = [r["in_flight"] for r in raw]
    assert len(raw) == 5 * 2 and max(levels) == 3 and min(levels) >= 1
    m = json.loads((tmp_path / "c3" / "manifest.json").read_text())
    assert m["collect"]["concurrency"] == 3 and m["status"] == "complete"


@pytest.mark.slow          # four collections against stand-in servers, then the ladder (~30 s)
def test_the_engines_ladder_from_collections_at_two_concurrencies(tmp_path, capsys):
    from atlas_ab.analysis.__main__ import main as analysis

    small = ["--workload", "tiny", "--set", "n_docs=12", "--set", "gen_tokens=30", "--no-progress"]
    runs = []
    for k in (1, 2):
        for c in (1, 3):
            with FakeEngine("vllm", K=k, p_cond=(0.7, 0.7)[:k], hang_after=2, hang_s=0.02) as fe:
                out = tmp_path / f"k{k}_c{c}"
                assert collect(["--url", fe.url, "--arm", out.name, "--out", str(out), "--concurrency", str(c),
                                *small]) == 0
                runs.append(out)
    capsys.readouterr()
    assert analysis(["ladder", *map(str, runs), "--out", str(tmp_path / "lad"), "--bootstrap", "100", "--json"]) == 0
    got = json.loads(capsys.readouterr().out.split("\nwrote")[0])
    cells = {(c["B"], c["K"]) for c in got["cells"]}
    assert cells == {(1, 1), (1, 2), (3, 1), (3, 2)}
    # E_K is the engine's own: 1 + accepted / verify steps over the answers sent at the full load
    for k in (1, 2):
        n = acc = 0
        for c in (1, 3):
            raw = [json.loads(x) for x in (tmp_path / f"k{k}_c{c}" / "raw" / "responses.jsonl").read_text().split("\n")
                   if x]
            for r in raw:
                if r["in_flight"] == c:
                    spec = r["response"]["metrics"]["speculative_decoding"]
                    n += spec["num_spec_steps"]
                    acc += spec["num_accepted_draft_tokens"]
        row = next(a for a in got["acceptance"] if a["K"] == k)
        assert n > 0 and abs(row["E"] - (1 + acc / n)) < 1e-12 and row["steps"] == n
    assert all("not known" in ch["verdict"] for ch in got["choices"].values())

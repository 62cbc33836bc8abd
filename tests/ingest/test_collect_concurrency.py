"""`collect --concurrency N`: N requests in flight, each answer recording the load it was sent at."""
import json

from atlas_ab.ingest.collect import main as collect
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

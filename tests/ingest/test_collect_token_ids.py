"""`collect --token-ids`: our workload's token ids go to llama.cpp's /completion and each turn continues
with the reply's token ids, so the server sees exactly our tokens (no text round trip, no BOS).
A stand-in for llama-server on 127.0.0.1 answers in the shape of tools/server/server-task.cpp
`to_json_non_oaicompat` (content, tokens with return_tokens, timings with draft_n / draft_n_accepted)."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from atlas_ab.collect.cli import main as collect
from atlas_ab.config.paths import PACKAGE_DIR
from atlas_ab.config.structured import SamplingConfig, WorkloadConfig
from atlas_ab.workload.documents import build_workload

SET = ["--set", "n_docs=2", "--set", "turns=3", "--set", "gen_tokens=5"]
WL = {"corpus": "stdlib", "split": "heldout", "n_docs": 2, "turns": 3, "chunk_tokens": 64, "gen_tokens": 5, "seed": 0}


class LlamaServerStandIn:
    def __init__(self, fail_after=None):
        self.bodies, self.fail_after, outer = [], fail_after, self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, obj, code=200):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    return self._send({"data": [{"id": "target.gguf", "owned_by": "llamacpp"}]})
                return self._send({"error": "not found"}, 404)

            def do_POST(self):
                b = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append((self.path, b))
                if outer.fail_after is not None and len(outer.bodies) > outer.fail_after:
                    return self._send({"error": "gone"}, 500)
                n = b["n_predict"]
                toks = [(sum(b["prompt"]) + i) % 4000 + 1 for i in range(n)]   # a function of the prompt
                return self._send({"content": "x" * n, "tokens": toks, "stop": True, "tokens_predicted": n,
                                   "timings": {"prompt_n": len(b["prompt"]), "predicted_n": n,
                                               "draft_n": 2 * (n - 2), "draft_n_accepted": n - 2}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        # shutdown() waits up to one poll interval (0.5 s by default)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server():
    s = LlamaServerStandIn()
    yield s
    s.close()


def test_prompts_are_our_token_ids_continued_with_the_replies_ids(server, tmp_path, capsys):
    out = tmp_path / "run"
    assert collect(["--url", server.url, "--arm", "a", "--out", str(out), "--token-ids", "--ignore-eos",
                    "--no-progress", "--concurrency", "1", *SET]) == 0
    docs = build_workload(WorkloadConfig(**WL), PACKAGE_DIR / "models" / "default" / "tokenizer.json").docs
    # the greedy probe (the first prompt twice, collect.check_greedy), then 3 documents x 2 turns
    assert [p for p, _ in server.bodies] == ["/completion"] * 8
    assert server.bodies[0][1]["prompt"] == server.bodies[1][1]["prompt"] == docs[0].chunks[0]
    lines = (out / "raw" / "responses.jsonl").read_text().splitlines()
    raw = {(r["doc_id"], r["turn"]): r for r in map(json.loads, lines)}
    for d in docs:
        context = []
        for t, chunk in enumerate(d.chunks):
            context += chunk
            body = next(b for _, b in server.bodies if b["prompt"] == context)   # exactly our ids, no BOS
            assert body["n_predict"] == 5 and body["temperature"] == 0 and body["return_tokens"] is True
            assert body["ignore_eos"] is True
            context += raw[(d.doc_id, t)]["response"]["tokens"]
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "complete" and m["collect"]["params"]["token_ids"] is True
    assert m["telemetry"]["source"] == "llamacpp"


def test_the_manifest_rebuilds_its_workload(server, tmp_path):
    # scripts/llamacpp_mtp_rows.py rebuilds the engine run's documents from its manifest alone
    out = tmp_path / "run"
    assert collect(["--url", server.url, "--arm", "a", "--out", str(out), "--token-ids", "--no-progress", *SET]) == 0
    w = json.loads((out / "manifest.json").read_text())["workload"]
    cfg = {**w["config"], "sampling": SamplingConfig(**w["config"]["sampling"])}
    assert w["config"]["sampling"] == {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": 0}
    tok = PACKAGE_DIR / "models" / "default" / "tokenizer.json"
    assert build_workload(WorkloadConfig(**cfg), tok).hash == w["hash"]


def test_token_ids_refused_where_they_cannot_hold(server, tmp_path, capsys):
    for extra, what in ((["--engine", "sglang"], "got engine sglang"), (["--stream"], "--stream")):
        code = collect(["--url", server.url, "--arm", "b", "--out", str(tmp_path / "b"), "--token-ids",
                        "--no-progress", *SET, *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "--token-ids: llama.cpp or vLLM only" in err[0] and what in err[0], err
    assert not server.bodies and not (tmp_path / "b").exists()


def test_resume_continues_with_the_stored_reply_ids(tmp_path, capsys):
    out, whole = tmp_path / "run", tmp_path / "whole"
    args = ["--arm", "a", "--token-ids", "--no-progress", "--concurrency", "1", "--retries", "0", *SET]
    s = LlamaServerStandIn(fail_after=4)     # the greedy probe's 2 requests, then 2 turns
    try:
        assert collect(["--url", s.url, "--out", str(out), *args]) == 2
    finally:
        s.close()
    capsys.readouterr()
    s, ref = LlamaServerStandIn(), LlamaServerStandIn()
    try:
        assert collect(["--url", s.url, "--out", str(out), "--resume", *args]) == 0
        assert collect(["--url", ref.url, "--out", str(whole), *args]) == 0
    finally:
        s.close()
        ref.close()
    # the probe again, then only the missing turns, their prompts as without the interruption
    assert len(s.bodies) == 2 + 4
    assert all(b in [rb for _, rb in ref.bodies] for _, b in s.bodies)

"""Engine answers in each engine's documented format, and a fake OpenAI-compatible server.

Field names follow the engines' sources (cited next to each builder); where a detail
could not be read in the stored sources it is built from the issue text and said so.
The acceptance itself is synthetic: a chain of per-depth hits drawn from a seed, so two
"arms" (two servers with different p_cond) answer the same prompts with the same text
(greedy, lossless) and different acceptance.
"""
from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

# ---- synthetic steps of one request -------------------------------------------------------

def chain_steps(seed_text: str, completion: int, K: int, p_cond, vary_k: bool = False):
    """(k per step, accept_len per step) committing `completion` tokens after the prefill's one
    (the last step may be cut by max_tokens), as greedy verification does."""
    rng = np.random.default_rng(int(hashlib.sha256(seed_text.encode()).hexdigest()[:12], 16))
    ks, accs, left = [], [], completion - 1
    while left > 0:
        k = int(rng.integers(1, K + 1)) if vary_k else K
        a = 0
        while a < k and rng.random() < p_cond[min(a, len(p_cond) - 1)]:
            a += 1
        ks.append(k)
        accs.append(a)
        left -= 1 + a
    return ks, accs


def reply_for(prompt_text: str, n_words: int) -> str:
    """The 'model's' greedy reply: a function of the prompt only (same in every arm)."""
    h = hashlib.sha256(prompt_text.encode()).hexdigest()
    return " ".join(h[i % 60:i % 60 + 4] for i in range(n_words))


def prompt_tokens(prompt_text: str) -> int:
    return max(1, len(prompt_text) // 4)


# ---- vLLM (vllm/v1/metrics/stats.py RequestSpecDecodeMetrics.to_dict; the feature doc of
# PR #48915: top-level metrics.speculative_decoding, n == 1, streamed on the final usage chunk)

def vllm_spec(ks, accs, K, detailed=True):
    n, A, D = len(accs), sum(accs), sum(ks)
    spec = {"mean_acceptance_length": 1 + A / n if n else 1.0,
            "draft_acceptance_rate": A / D if D else 0.0,
            "acceptance_histogram": np.bincount(np.asarray(accs, int), minlength=K + 1).tolist(),
            "num_spec_steps": n, "num_accepted_draft_tokens": A, "num_draft_tokens": D, "num_spec_tokens": K}
    if detailed and n:
        spec["per_step_accepted"] = list(accs)
        spec["per_step_drafted"] = list(ks)
    return spec


def vllm_response(text, P, C, spec, model="m", api="chat", variant="metrics"):
    choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
              if api == "chat" else {"index": 0, "text": text, "finish_reason": "length"})
    body = {"id": "chatcmpl-x", "object": "chat.completion" if api == "chat" else "text_completion",
            "model": model, "choices": [choice],
            "usage": {"prompt_tokens": P, "completion_tokens": C, "total_tokens": P + C}}
    if variant == "metrics":
        body["metrics"] = {"speculative_decoding": spec}
    elif variant == "stats":  # the earlier --per-request-spec-decode-stats: per choice, sparse histogram
        old = dict(spec)
        old["acceptance_histogram"] = {str(j): c for j, c in enumerate(spec["acceptance_histogram"]) if c}
        choice["speculative_decoding_stats"] = old
    return body


def vllm_stream(text, P, C, spec, model="m", final_usage=True):
    words = text.split(" ")
    chunks = [{"id": "chatcmpl-x", "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": {"content": w + (" " if i < len(words) - 1 else "")},
                            "finish_reason": None}]} for i, w in enumerate(words)]
    chunks[-1]["choices"][0]["finish_reason"] = "length"
    if final_usage:
        chunks.append({"id": "chatcmpl-x", "object": "chat.completion.chunk", "model": model, "choices": [],
                       "usage": {"prompt_tokens": P, "completion_tokens": C, "total_tokens": P + C},
                       "metrics": {"speculative_decoding": spec}})
    return chunks


# ---- SGLang (python/sglang/srt/managers/tokenizer_manager.py, meta_info spec fields;
# proposed = verify_ct x (speculative_num_draft_tokens - 1); accept_length = completion / verify_ct)

def sglang_meta(ks, accs, K, P, C, version="new"):
    n, A = len(accs), sum(accs)
    meta = {"id": "x", "prompt_tokens": P, "completion_tokens": C, "finish_reason": {"type": "length"}}
    if not n:
        return meta
    D = n * K
    if version == "new":
        meta.update(spec_verify_ct=n, spec_num_correct_drafts=A, spec_num_proposed_drafts=D,
                    spec_accepted_drafts=A, spec_proposed_drafts=D, spec_accept_rate=A / D,
                    spec_accept_length=C / n,
                    spec_correct_drafts_histogram=np.bincount(np.asarray(accs, int), minlength=K + 1).tolist())
        meta["spec_accept_histogram"] = meta["spec_correct_drafts_histogram"]
    else:  # older: spec_accept_token_num / spec_draft_token_num, no histogram
        meta.update(spec_verify_ct=n, spec_accept_token_num=A, spec_draft_token_num=D, spec_accept_rate=A / D,
                    spec_accept_length=C / n)
    return meta


def sglang_response(text, meta, model="m"):
    return {"id": "x", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length",
                         "meta_info": meta}],
            "usage": {"prompt_tokens": meta["prompt_tokens"], "completion_tokens": meta["completion_tokens"]}}


# ---- TensorRT-LLM (tensorrt_llm/serve/openai_server.py get_perf_metrics; SpecDecodingStats in
# cpp/include/tensorrt_llm/executor/types.h)

def trtllm_entry(request_id, ks, accs):
    pm = {"first_iter": 1, "last_iter": 2, "timing_metrics": {}, "kv_cache_metrics": {}}
    D, A = sum(ks), sum(accs)
    if D:
        pm["speculative_decoding"] = {"acceptance_rate": A / D, "total_accepted_draft_tokens": A,
                                      "total_draft_tokens": D}
    return {"request_id": request_id, "perf_metrics": pm}


def trtllm_iterations(per_iter):
    """per_iter: list of (drafted, accepted, requests_with_drafts)."""
    return [{"iter": i, "iterLatencyMS": 10.0,
             "specDecodingStats": {"numDraftTokens": d, "numAcceptedTokens": a, "numRequestsWithDraftTokens": r,
                                   "acceptanceLength": 1 + a / r if r else 0.0, "iterLatencyMS": 1.0,
                                   "draftOverhead": 0.1}} for i, (d, a, r) in enumerate(per_iter)]


# ---- llama.cpp (tools/server/server.cpp: timings.draft_n, draft_n_accepted) and ik_llama.cpp
# (timings.draft_by_depth [{depth, draft_n, draft_n_accepted}], depths that drafted only)

def llamacpp_response(text, ks, accs, P, C, by_depth=False, model="m"):
    t = {"prompt_n": P, "predicted_n": C, "predicted_ms": 10.0}
    if sum(ks):
        t["draft_n"], t["draft_n_accepted"] = sum(ks), sum(accs)
    if by_depth and sum(ks):
        K = max(ks)
        t["draft_by_depth"] = [{"depth": i, "draft_n": sum(k >= i for k in ks),
                                "draft_n_accepted": sum(a >= i for a in accs)} for i in range(1, K + 1)
                               if sum(k >= i for k in ks)]
    return {"id": "chatcmpl-x", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": P, "completion_tokens": C}, "timings": t}


# ---- Prometheus text (vllm/v1/spec_decode/metrics.py SpecDecodingProm; tensorrt_llm/metrics/collector.py)

def vllm_prom(n, D, A, per_pos, engine="0"):
    lab = f'engine="{engine}",model_name="m"'
    lines = ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
             "# TYPE vllm:spec_decode_num_drafts_total counter",
             f"vllm:spec_decode_num_drafts_total{{{lab}}} {float(n)}",
             f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {float(D)}",
             f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {float(A)}"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {float(v)}'
              for i, v in enumerate(per_pos)]
    lines.append('vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9')
    return "\n".join(lines) + "\n"


def trtllm_prom(drafted, accepted):
    lines = ["# TYPE trtllm_spec_decode_drafted_tokens counter"]
    lines += [f'trtllm_spec_decode_drafted_tokens_total{{token_position="{i}",worker="0"}} {v}'
              for i, v in enumerate(drafted)]
    lines += ["# TYPE trtllm_spec_decode_accepted_tokens counter"]
    lines += [f'trtllm_spec_decode_accepted_tokens_total{{token_position="{i}",worker="0"}} {v}'
              for i, v in enumerate(accepted)]
    return "\n".join(lines) + "\n"


# ---- the fake server --------------------------------------------------------------------------

class FakeEngine:
    """An OpenAI-compatible server on 127.0.0.1 (port 0) answering in one engine's format.

    engine: vllm | sglang | trtllm | llamacpp; mode (vllm): detailed | summary | stats | none;
    fail_first: the first N POSTs answer 503; vary_k: drafts of random length 1..K;
    sampling: every answer's text differs (a server that samples whatever the request says);
    text_salt: a deterministic text that differs from the unsalted server's on about half the
    prompts (an arm that decoded other text); perf_delay (trtllm): the first N GETs of
    /perf_metrics after an answer find nothing yet (a streamed request's metrics recorded after
    [DONE]); models_raw: (bytes, content type) served for /v1/models instead of JSON;
    hang_after: POSTs after this many hang for `hang_s` seconds (or until the server closes) before
    answering; sglang_stream_400:
    SGLang's refusal of return_meta_info with stream=true."""

    def __init__(self, engine="vllm", K=2, p_cond=(0.6, 0.7), mode="detailed", fail_first=0, vary_k=False,
                 by_depth=False, n_choices=1, final_usage=True, owned_by=None, sglang_version="new",
                 fail_after=None, sampling=False, text_salt=None, perf_delay=0, models_raw=None,
                 hang_after=None, hang_s=3.0):
        self.engine, self.K, self.p_cond, self.mode = engine, K, p_cond, mode
        self.fail_left, self.vary_k, self.by_depth = fail_first, vary_k, by_depth
        self.fail_after = fail_after  # every POST after this many answers 500 (a dying server)
        self.n_choices, self.final_usage, self.sglang_version = n_choices, final_usage, sglang_version
        self.owned_by = owned_by or {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp",
                                     "trtllm": "tensorrt_llm"}[engine]
        self.requests, self.perf, self.next_id, self.lock = [], [], 0, threading.Lock()
        self.sampling, self.text_salt, self.perf_delay, self.models_raw = sampling, text_salt, perf_delay, models_raw
        self.hang_after, self.hang_s, self.perf_hidden = hang_after, hang_s, 0
        self.closing = threading.Event()     # a hung handler stops hanging when the test is done with it
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, obj=None, raw=None, ctype="application/json"):
                data = raw if raw is not None else json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models" and outer.models_raw is not None:
                    return self._send(200, raw=outer.models_raw[0], ctype=outer.models_raw[1])
                if self.path == "/v1/models":
                    return self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model",
                                                                         "owned_by": outer.owned_by}]})
                if self.path == "/version" and outer.engine in ("vllm", "trtllm"):
                    return self._send(200, {"version": "9.9.9-fake"})
                if self.path == "/perf_metrics" and outer.engine == "trtllm":
                    with outer.lock:
                        if outer.perf_hidden > 0:        # not recorded yet
                            outer.perf_hidden -= 1
                            return self._send(200, [])
                        out, outer.perf = outer.perf, []
                    return self._send(200, out)
                return self._send(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(body)
                    if outer.fail_left > 0:
                        outer.fail_left -= 1
                        return self._send(503, {"error": "warming up"})
                    if outer.fail_after is not None and len(outer.requests) > outer.fail_after:
                        return self._send(500, {"error": "engine died"})
                    hang = outer.hang_after is not None and len(outer.requests) > outer.hang_after
                    if outer.engine == "sglang" and body.get("stream") and body.get("return_meta_info"):
                        # python/sglang/srt/entrypoints/openai/serving_chat.py: a ValueError -> HTTP 400
                        return self._send(400, {"object": "error", "message": "return_meta_info is not supported "
                                                "with streaming. Please set stream=false when using "
                                                "return_meta_info=true.", "code": 400})
                    code, obj, raw = outer.answer(body)
                if hang:
                    outer.closing.wait(outer.hang_s)
                if raw is not None:
                    return self._send(code, raw=raw, ctype="text/event-stream")
                return self._send(code, obj)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # a handler still answering (hang_after) is joined on exit, and a client that gave up on it
        # (a broken pipe) prints nothing into the next test's stderr
        self.server.daemon_threads = False
        self.server.handle_error = lambda request, client_address: None
        # shutdown() waits up to one poll interval: the default 0.5 s was most of a short test
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def answer(self, body):
        prompt = (json.dumps(body["messages"]) if "messages" in body else body["prompt"])
        C = int(body.get("max_tokens", 16))
        P = prompt_tokens(prompt)
        text = reply_for(prompt, 6)
        if self.sampling:
            self.next_draw = getattr(self, "next_draw", 0) + 1
            text = reply_for(prompt + f"#draw{self.next_draw}", 6)
        elif self.text_salt is not None and int(hashlib.sha256(prompt.encode()).hexdigest()[0], 16) % 2 == 0:
            text = reply_for(prompt + self.text_salt, 6)
        ks, accs = chain_steps(prompt, C, self.K, self.p_cond, self.vary_k)
        api = "chat" if "messages" in body else "completions"
        if self.engine == "vllm":
            spec = vllm_spec(ks, accs, self.K, detailed=self.mode == "detailed")
            if body.get("stream"):
                chunks = vllm_stream(text, P, C, spec, final_usage=self.final_usage)
                raw = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                return 200, None, raw.encode()
            resp = vllm_response(text, P, C, spec, api=api,
                                 variant={"detailed": "metrics", "summary": "metrics"}.get(self.mode, self.mode))
            if self.n_choices > 1:
                resp["choices"] = [dict(resp["choices"][0], index=i) for i in range(self.n_choices)]
                resp["metrics"] = {"speculative_decoding": None}
            return 200, resp, None
        if self.engine == "sglang":
            meta = sglang_meta(ks, accs, self.K, P, C, self.sglang_version)
            if not body.get("return_meta_info"):
                resp = sglang_response(text, meta)
                del resp["choices"][0]["meta_info"]
                return 200, resp, None
            return 200, sglang_response(text, meta), None
        if self.engine == "trtllm":
            self.next_id += 1
            self.perf.append(trtllm_entry(self.next_id, ks, accs))
            self.perf_hidden = self.perf_delay
            if body.get("stream"):
                chunks = vllm_stream(text, P, C, None, final_usage=True)
                chunks[-1].pop("metrics")
                raw = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                return 200, None, raw.encode()
            return 200, vllm_response(text, P, C, None, api=api, variant="none"), None
        return 200, llamacpp_response(text, ks, accs, P, C, by_depth=self.by_depth), None


# ---- our own runs, shaped as a greedy engine run ------------------------------------------------

def greedy_positions(df, base: int = 100):
    """Positions as the runner writes them under greedy verification: the turn's prompt length
    (a function of doc and turn) plus the tokens committed by the earlier steps (1 + accept_len)."""
    df = df.sort_values(["doc_id", "turn", "step"], kind="stable").reset_index(drop=True)
    pos = []
    for (d, t), g in df.groupby(["doc_id", "turn"], sort=True):
        commits = 1 + g["accept_len"].to_numpy()
        pos.append(base + 64 * int(t) + 7 * int(d) + np.concatenate([[0], np.cumsum(commits[:-1])]))
    df["position"] = np.concatenate(pos).astype(np.int64)
    return df

"""The collector's HTTP side: one OpenAI-compatible server, asked greedily.

`http` is one request (JSON or a server-sent-event stream, urllib only); `Client` builds each
request's body for the engine, retries with backoff on connection errors, 429 and 5xx, and
drains TensorRT-LLM's /perf_metrics; `probe` asks the server what it is, `check_greedy` whether
it answers one prompt the same twice. `Waiting` prints the longest wait while requests are out.
"""
from __future__ import annotations

import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from atlas_ab import AtlasError
from atlas_ab.collect.plan import Plan
from atlas_ab.ingest.completion_hash import completion_text, text_sha256
from atlas_ab.ingest.jsonio import sse_payloads

PROG = "atlas_ab.collect"
ENGINES = ("vllm", "sglang", "trtllm", "llamacpp")
RAW = "raw/responses.jsonl"
RETRY_STATUS = {408, 429, 500, 502, 503, 504}
# /v1/models owned_by per engine (TensorRT-LLM: ModelCard.owned_by = "tensorrt_llm" in
# tensorrt_llm/serve/openai_protocol.py)
OWNED_BY = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp", "llama.cpp": "llamacpp",
            "tensorrt_llm": "trtllm"}
#: The fixed seed every request carries: vLLM, SGLang, TensorRT-LLM and llama.cpp all take one, so a
#: sampling default the server applies despite temperature 0 draws the same numbers each time.
SEED = 0
#: Defaults a user expects: a request that has sent nothing for a minute is a hung server (a
#: greedy answer of a few hundred tokens takes seconds), and it fails after that one wait, not
#: after four of ten minutes each; connection errors, 429 and 5xx are retried twice.
TIMEOUT_S, RETRIES = 60.0, 2
#: TensorRT-LLM records a streamed request's metrics after it wrote [DONE]: wait this long for them.
PERF_WAIT_S = 5.0
HINT = {"vllm": "start vLLM with --per-request-spec-decode-metrics detailed (summary loses the per-step arrays)",
        "sglang": "the collector sends return_meta_info: true",
        "trtllm": "start trtllm-serve with return_perf_metrics: true in --extra_llm_api_options",
        "llamacpp": "start llama-server with a draft model (--model-draft) or MTP"}


class HTTPFailure(Exception):
    def __init__(self, msg: str, retry: bool, reached: bool = False):
        super().__init__(msg)
        self.retry = retry
        self.reached = reached        # the server answered (an HTTP error, or not JSON)


def not_json(method: str, url: str, status: int, ctype: str | None, raw: bytes) -> HTTPFailure:
    """The server answered, but not with JSON: say what it answered (a proxy's HTML page, a
    different service on the port, an engine's plain-text error)."""
    return HTTPFailure(f"{method} {url} answered HTTP {status} ({ctype or 'no content type'}), not JSON: "
                       f"{raw[:120]!r}", False, reached=True)


def http(method: str, url: str, body: dict | None = None, timeout: float = TIMEOUT_S, stream: bool = False):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            if stream:
                return [line.decode("utf-8", "replace").rstrip("\r\n") for line in resp]
            raw, status, ctype = resp.read(), resp.status, resp.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        detail = e.read()[:300].decode("utf-8", "replace").replace("\n", " ")
        raise HTTPFailure(f"HTTP {e.code} from {url}: {detail}", e.code in RETRY_STATUS, reached=True) from None
    except (TimeoutError, socket.timeout):
        # a hung server stays hung: one wait of --timeout, not one per retry
        raise HTTPFailure(f"{url}: no answer within --timeout {timeout:g} s", False) from None
    except (urllib.error.URLError, ConnectionError, OSError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, (TimeoutError, socket.timeout)):
            raise HTTPFailure(f"{url}: no answer within --timeout {timeout:g} s", False) from None
        raise HTTPFailure(f"{url}: {reason}", True) from None
    try:
        return json.loads(raw)
    except ValueError:
        raise not_json(method, url, status, ctype, raw) from None


# ---- the client ----------------------------------------------------------------------------

@dataclass
class Client:
    url: str
    engine: str
    model: str
    api: str = "chat"
    stream: bool = False
    retries: int = RETRIES
    timeout: float = TIMEOUT_S
    ignore_eos: bool = False
    token_ids: bool = False        # prompts and replies as token ids: llama.cpp's own /completion
    lock: threading.Lock = field(default_factory=threading.Lock)
    waiting: dict = field(default_factory=dict)     # where -> when its request was sent (progress)
    in_flight: dict = field(default_factory=dict)   # where -> requests in flight when it was sent, itself included

    @property
    def root(self) -> str:
        u = self.url.rstrip("/")
        return u[:-3] if u.endswith("/v1") else u

    def body(self, messages: list[dict], max_tokens: int) -> dict:
        if self.token_ids:   # no text round trip: the server sees exactly our tokens (and adds no BOS to ids)
            ids = [i for m in messages for i in m["ids"]]
            if self.engine == "vllm":    # /v1/completions takes a prompt of ids; return_token_ids answers in ids
                return {"model": self.model, "prompt": ids, "max_tokens": max_tokens, "temperature": 0, "n": 1,
                        "seed": SEED, "return_token_ids": True, "stream": False,
                        **({"ignore_eos": True} if self.ignore_eos else {})}
            return {"prompt": ids, "n_predict": max_tokens, "temperature": 0,
                    "seed": SEED, "return_tokens": True, "cache_prompt": True, "ignore_eos": self.ignore_eos,
                    "stream": False}
        # greedy in every request: temperature 0, one choice, and a fixed seed for any sampling default
        b = {"model": self.model, "max_tokens": max_tokens, "temperature": 0, "n": 1, "seed": SEED,
             "stream": self.stream}
        if self.api == "chat":
            b["messages"] = messages
        else:  # the document continues: earlier chunks and replies, then the next chunk
            b["prompt"] = "".join(m["content"] for m in messages)
        if self.stream:
            b["stream_options"] = {"include_usage": True}
        if self.engine == "sglang":
            b["return_meta_info"] = True
        if self.ignore_eos:
            b["ignore_eos"] = True
        return b

    def call(self, messages: list[dict], max_tokens: int, where: str) -> tuple[dict, int, float]:
        path = "/chat/completions" if self.api == "chat" else "/completions"
        if self.token_ids and self.engine == "vllm":
            path = "/completions"
        url = self.root + "/completion" if self.token_ids and self.engine == "llamacpp" else self.url.rstrip("/") + path
        body = self.body(messages, max_tokens)
        t0 = time.perf_counter()
        with self.lock:        # the load level this answer was measured at (the K ladder reads it)
            self.waiting[where] = time.monotonic()
            self.in_flight[where] = len(self.waiting)
        try:
            return self._attempts(path, url, body, where, t0)
        finally:
            self.waiting.pop(where, None)

    def _attempts(self, path: str, url: str, body: dict, where: str, t0: float) -> tuple[dict, int, float]:
        last = None
        for attempt in range(1, self.retries + 2):
            try:
                if self.stream:
                    got = {"stream": sse_payloads(http("POST", self.url.rstrip("/") + path, body, self.timeout,
                                                       stream=True), self.url.rstrip("/") + path)}
                else:
                    got = {"response": http("POST", url, body, self.timeout)}
                if self.engine == "trtllm":
                    got["extra"] = {"perf_metrics": self.perf_entry(where)}
                return got, attempt, time.perf_counter() - t0
            except HTTPFailure as e:
                last = e
                if not e.retry:
                    break
                if attempt <= self.retries:
                    time.sleep(min(0.25 * 2 ** (attempt - 1), 8.0))
        raise AtlasError(f"{where}: {last} (after {attempt} attempt(s))")

    def perf_entry(self, where: str, wait_s: float | None = None) -> dict:
        """TensorRT-LLM keeps per-request metrics apart from the response: drain /perf_metrics
        after each request (one request in flight, so the one entry is this request's). A
        streamed request's entry is recorded only after the server wrote [DONE]
        (tensorrt_llm/serve/openai_server.py, chat_stream_generator: `yield "data: [DONE]"`, then
        `await self._extract_metrics(...)`), so an empty list is asked again for `wait_s`."""
        wait_s = PERF_WAIT_S if wait_s is None else wait_s
        deadline, pause = time.monotonic() + wait_s, 0.02
        while True:
            entries = http("GET", self.root + "/perf_metrics", timeout=self.timeout)
            if not isinstance(entries, list):
                raise AtlasError(f"{where}: GET /perf_metrics answered {type(entries).__name__}, not a list")
            if entries or time.monotonic() >= deadline:
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
        if len(entries) != 1:
            raise AtlasError(f"{where}: GET /perf_metrics returned {len(entries)} entries, one expected ("
                             + (f"none within {wait_s:g} s of the answer: start trtllm-serve with "
                                "return_perf_metrics: true" if not entries else "other traffic on the server") + ")")
        return entries[0]


def reply_text(got: dict) -> str:
    resp = got.get("response")
    if isinstance(resp, dict) and "content" in resp and "choices" not in resp:     # llama.cpp's /completion
        return resp.get("content") or ""
    return completion_text(resp, got.get("stream")) or ""


def reply_ids(got: dict, max_tokens: int, where: str) -> list[int]:
    """The reply's token ids (--token-ids: llama.cpp's /completion with return_tokens; vLLM's
    /v1/completions with return_token_ids)."""
    resp = got.get("response") or {}
    ids = resp.get("tokens") if "choices" not in resp else ((resp.get("choices") or [{}])[0] or {}).get("token_ids")
    field = "tokens" if "choices" not in resp else "choices[0].token_ids"
    if not isinstance(ids, list) or not all(isinstance(i, int) and i >= 0 for i in ids) or len(ids) > max_tokens:
        raise AtlasError(f"{where}: field '{field}': expected at most {max_tokens} token ids, got {str(ids)[:80]}")
    return ids


def probe(url: str, engine: str, timeout: float) -> dict:
    """What the server says about itself: the served model, the engine and its version."""
    root = url.rstrip("/")[:-3] if url.rstrip("/").endswith("/v1") else url.rstrip("/")
    info = {"endpoint": url, "reported_model": None, "owned_by": None, "version": None}
    try:
        models = http("GET", url.rstrip("/") + "/models", timeout=timeout)
    except HTTPFailure as e:
        # reached: it answered, with an HTTP error or something other than JSON; say what
        raise AtlasError(f"{'the server answered, but' if e.reached else 'cannot reach the server:'} {e}") from None
    if not isinstance(models, dict) or not isinstance(models.get("data", []), list):
        raise AtlasError(f"GET {url.rstrip('/')}/models answered JSON that is not an OpenAI model list: "
                         f"{json.dumps(models)[:120]}")
    data = [m for m in models.get("data") or [] if isinstance(m, dict)]
    info["models"] = [m.get("id") for m in data]
    if data:
        info["reported_model"], info["owned_by"] = data[0].get("id"), data[0].get("owned_by")
    if engine == "auto":
        engine = OWNED_BY.get(str(info["owned_by"]).lower())
        if engine is None:
            raise AtlasError(f"{url}/models says owned_by={info['owned_by']!r}: cannot tell the engine; "
                             f"pass --engine ({', '.join(ENGINES)})")
    info["engine"] = engine
    for path, key in (("/version", "version"), ("/get_server_info", "version"), ("/props", "build_info")):
        try:
            got = http("GET", root + path, timeout=min(timeout, 10))
        except HTTPFailure:
            continue
        if isinstance(got, dict) and got.get(key):
            info["version"] = str(got[key])
            break
    return info


def refuse_unusable(engine: str, stream: bool) -> None:
    """Combinations that cannot give telemetry, refused before the first request."""
    if engine == "sglang" and stream:
        # SGLang's OpenAI endpoints reject return_meta_info with stream=true (serving_chat.py:
        # "return_meta_info is not supported with streaming"), and without meta_info its answers
        # carry no spec-decode counts
        raise AtlasError("--stream with sglang: SGLang rejects return_meta_info when streaming, and its "
                         "spec-decode counts come only in meta_info; collect SGLang without --stream")


def check_greedy(client: Client, plan: Plan) -> dict:
    """Ask the plan's first prompt twice; a server whose two answers differ is not decoding
    greedily (a sampling default, a nondeterministic kernel), so two arms collected from it
    would not share a text and could not be paired. Returns the manifest's `probe`."""
    c = plan.conversations[0]
    messages, mt = [{"role": "user", "content": c.turns[0]}], min(c.max_tokens[0], 32)
    if client.token_ids:     # the turn's token ids
        messages[0]["ids"] = c.ids[0]
    answers = [client.call(messages, mt, f"probe {i + 1} of 2 (doc {c.doc_id} turn 0)")[0] for i in range(2)]
    texts = [reply_text(a) for a in answers]
    hashes = [text_sha256(t) for t in texts]
    if hashes[0] != hashes[1]:
        at = next((i for i, (x, y) in enumerate(zip(*texts)) if x != y), min(map(len, texts)))
        raise AtlasError(f"the server answered the same greedy request (doc {c.doc_id} turn 0, temperature 0, "
                         f"seed {SEED}, {mt} tokens) differently twice (from character {at}: "
                         f"{texts[0][at:at + 30]!r} vs {texts[1][at:at + 30]!r}): it samples, so its arms "
                         "would not commit one text; start it greedy (no sampling defaults) or deterministic")
    return {"doc_id": c.doc_id, "turn": 0, "max_tokens": mt, "completion_sha256": hashes[0], "identical": True}


class Waiting:
    """While requests are out, a line on stderr every `every` seconds naming the longest wait
    (a hung server shows as one request's growing wait, against --timeout)."""

    def __init__(self, client: Client, every: float | None = None, out=sys.stderr):
        # every 10 s, or four times within a shorter --timeout
        self.every = every if every is not None else min(10.0, max(0.5, client.timeout / 4))
        self.client, self.out = client, out
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            waiting = dict(self.client.waiting)
            if not waiting:
                continue
            where, since = min(waiting.items(), key=lambda kv: kv[1])
            waited = time.monotonic() - since
            if waited >= self.every:
                print(f"{PROG}: waiting: {where} for {waited:.0f} s (--timeout {self.client.timeout:g} s), "
                      f"{len(waiting)} request(s) out", file=self.out, flush=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

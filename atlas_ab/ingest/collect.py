"""`python -m atlas_ab.ingest.collect`: atlas_ab as the A/B client of a running engine.

Sends a workload to any OpenAI-compatible server with greedy settings (temperature 0,
n = 1, a fixed seed; a server that answers one probe prompt differently twice is refused),
records each response's spec-decode telemetry with its doc_id and turn (engines
do not know them), and writes a run directory in the contract at the finest grain the
engine gives (atlas_ab/ingest). Restart the engine with the lever flipped, collect again
under the other arm name, then `python -m atlas_ab.analysis report RUN_A RUN_B --prereg ...`.

  workload   ours (atlas_ab/workload/documents.py: documents x turns of corpus text, decoded with the
             embedded tokenizer) or the user's prompts (--prompts FILE.jsonl: {"turns": [...]}
             or {"prompt": "..."} per line, optional "doc_id", "max_tokens")
  turns      turn t's request is the conversation so far (earlier chunks and the server's
             own replies) plus chunk t
  robustness bounded concurrency (documents in parallel, turns in order), retries with
             backoff on connection errors / 429 / 5xx, a progress bar, resume (--resume):
             every answer is appended (and fsync'd) to raw/responses.jsonl as it arrives
  manifest   endpoint, reported model, engine and version where the server says, prompts
             hash, arm, the telemetry's grain; status running -> complete, written last

Standard library HTTP only (urllib + concurrent.futures).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import math
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.ingest.completions import completion_text, text_sha256
from atlas_ab.ingest.jsonio import sse_payloads

PROG = "atlas_ab.ingest.collect"
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


@dataclass
class Conversation:
    doc_id: int
    turns: list[str]
    max_tokens: list[int]
    ids: list[list[int]] | None = None      # the turns' token ids (our workload), for --token-ids


@dataclass
class Plan:
    conversations: list[Conversation]
    source: dict                   # what the prompts are (workload config + hash, or the file + hash)
    workload_hash: str | None = None

    @property
    def n_requests(self) -> int:
        return sum(len(c.turns) for c in self.conversations)


# ---- the workload ---------------------------------------------------------------------------

def workload_plan(name: str, overrides: list[str]) -> Plan:
    """Our workload (conf/workload/NAME.yaml + KEY=VALUE overrides), its chunks decoded to text."""
    import dataclasses

    import yaml
    from tokenizers import Tokenizer

    from atlas_ab.config.paths import PACKAGE_DIR
    from atlas_ab.config.structured import SamplingConfig, WorkloadConfig
    from atlas_ab.workload.documents import build_workload

    path = PACKAGE_DIR / "conf" / "workload" / f"{name}.yaml"
    if not path.is_file():
        have = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise AtlasError(f"--workload {name!r}: no {path.name} (have: {', '.join(have)})")
    cfg = yaml.safe_load(path.read_text()) or {}
    names = {f.name: f.type for f in dataclasses.fields(WorkloadConfig)}
    for o in overrides:
        key, _, value = o.partition("=")
        if key not in names or not _:
            raise AtlasError(f"--set {o!r}: expected KEY=VALUE with KEY one of {', '.join(names)}")
        cfg[key] = int(value) if value.lstrip("-").isdigit() else value
    tok_path = PACKAGE_DIR / "models" / "default" / "tokenizer.json"
    cfg["sampling"] = SamplingConfig(**(cfg.get("sampling") or {}))
    wl = build_workload(WorkloadConfig(**cfg), tok_path)
    tok = Tokenizer.from_file(str(tok_path))
    convs = [Conversation(d.doc_id, [tok.decode(c, skip_special_tokens=False) for c in d.chunks],
                          [wl.gen_tokens] * len(d.chunks), [list(c) for c in d.chunks]) for d in wl.docs]
    # the sampling block as data, not its repr: the manifest's config rebuilds the workload
    record = {**cfg, "sampling": dataclasses.asdict(cfg["sampling"])}
    return Plan(convs, {"workload": name, "config": record, "hash": wl.hash, "tokenizer": str(tok_path)}, wl.hash)


def prompts_plan(path: Path, max_tokens: int) -> Plan:
    if not path.is_file():
        raise AtlasError(f"{path}: no such prompts file")
    convs, seen = [], set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError as e:
            raise AtlasError(f"{path}: line {n}: not JSON ({e.msg})") from None
        if not isinstance(d, dict) or ("turns" in d) == ("prompt" in d):
            raise AtlasError(f"{path}: line {n}: expected an object with either 'turns' (a list of strings) "
                             "or 'prompt' (a string)")
        turns = d["turns"] if "turns" in d else [d["prompt"]]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
            raise AtlasError(f"{path}: line {n}: field 'turns' must be a non-empty list of strings")
        doc = d.get("doc_id", len(convs))
        if not isinstance(doc, int) or doc < 0 or doc in seen:
            raise AtlasError(f"{path}: line {n}: field 'doc_id' must be a new integer >= 0, got {doc!r}")
        seen.add(doc)
        mt = d.get("max_tokens", max_tokens)
        if not isinstance(mt, int) or mt < 1:
            raise AtlasError(f"{path}: line {n}: field 'max_tokens' must be an integer >= 1")
        convs.append(Conversation(doc, turns, [mt] * len(turns)))
    if not convs:
        raise AtlasError(f"{path}: no prompts")
    h = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return Plan(convs, {"prompts": str(path), "hash": h}, h)


def prompts_hash(plan: Plan) -> str:
    """The prompts every arm must share: documents, turns' text, max_tokens."""
    h = hashlib.sha256()
    for c in plan.conversations:
        h.update(json.dumps([c.doc_id, c.turns, c.max_tokens]).encode())
    return "sha256:" + h.hexdigest()


# ---- HTTP ----------------------------------------------------------------------------------

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
            return {"prompt": [i for m in messages for i in m["ids"]], "n_predict": max_tokens, "temperature": 0,
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
        url = self.root + "/completion" if self.token_ids else self.url.rstrip("/") + path
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
    return completion_text(got.get("response"), got.get("stream")) or ""


def reply_ids(got: dict, max_tokens: int, where: str) -> list[int]:
    """The reply's token ids (--token-ids: llama.cpp's /completion with return_tokens)."""
    ids = (got.get("response") or {}).get("tokens")
    if not isinstance(ids, list) or not all(isinstance(i, int) and i >= 0 for i in ids) or len(ids) > max_tokens:
        raise AtlasError(f"{where}: field 'tokens': expected at most {max_tokens} token ids, got {str(ids)[:80]}")
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
    if client.token_ids:     # llama.cpp's /completion takes the turn's token ids
        messages[0]["ids"] = c.ids[0]
    answers = [client.call(messages, mt, f"probe {i + 1} of 2 (doc {c.doc_id} turn 0)")[0] for i in range(2)]
    texts = [(a["response"].get("content") or "") if client.token_ids else reply_text(a) for a in answers]
    hashes = [text_sha256(t) for t in texts]
    if hashes[0] != hashes[1]:
        at = next((i for i, (x, y) in enumerate(zip(*texts)) if x != y), min(map(len, texts)))
        raise AtlasError(f"the server answered the same greedy request (doc {c.doc_id} turn 0, temperature 0, "
                         f"seed {SEED}, {mt} tokens) differently twice (from character {at}: "
                         f"{texts[0][at:at + 30]!r} vs {texts[1][at:at + 30]!r}): it samples, so its arms "
                         "would not commit one text; start it greedy (no sampling defaults) or deterministic")
    return {"doc_id": c.doc_id, "turn": 0, "max_tokens": mt, "completion_sha256": hashes[0], "identical": True}


def resume_differences(old: dict, arm: str, phash: str, params: dict) -> list[str]:
    """What differs between a stored collection and this invocation: the prompts, which request
    parameters (old -> new), the arm."""
    was = old.get("collect") or {}
    out = []
    if was.get("prompts_hash") != phash:
        out.append(f"the prompts (hash {str(was.get('prompts_hash'))[:19]} stored, {phash[:19]} now: another "
                   "workload, --set or --prompts file)")
    old_params = was.get("params") or {}
    changed = [f"{k} {old_params.get(k)!r} -> {params.get(k)!r}" for k in sorted(set(old_params) | set(params))
               if old_params.get(k) != params.get(k)]
    if changed:
        out.append("the request parameters (" + ", ".join(changed) + ")")
    if old.get("arm") != arm:
        out.append(f"the arm ({old.get('arm')!r} stored, {arm!r} now)")
    return out


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


# ---- raw records and resume ----------------------------------------------------------------

def read_raw(path: Path) -> dict[tuple[int, int], dict]:
    """The answers already stored; a torn last line (a crash mid-write) is cut off."""
    done: dict[tuple[int, int], dict] = {}
    if not path.exists():
        return done
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    good = 0
    for i, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except ValueError as e:
            if i == len(lines) - 1:
                break
            raise AtlasError(f"{path}: line {i + 1}: not JSON (not a torn last line): "
                             "remove the run to start over") from e
        done[(rec["doc_id"], rec["turn"])] = rec
        good += len(line.encode("utf-8"))
    if good != path.stat().st_size:
        with open(path, "r+b") as f:
            f.truncate(good)
    return done


def append_raw(path: Path, rec: dict, lock: threading.Lock) -> None:
    line = (json.dumps(rec) + "\n").encode("utf-8")
    with lock:
        with open(path, "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


# ---- the run -------------------------------------------------------------------------------

def collect(args) -> int:
    from atlas_ab.atomic import write_json
    from atlas_ab.ingest import ingest
    from atlas_ab.ingest.records import Record
    from atlas_ab.ingest.units import Where
    from atlas_ab.ingest.write import check_out
    from atlas_ab.run.provenance import code_identity, now
    from atlas_ab.run.store import MANIFEST

    out = Path(args.out)
    if args.prompts:
        plan = prompts_plan(Path(args.prompts), args.max_tokens)
    else:
        plan = workload_plan(args.workload, args.set or [])
    info = probe(args.url, args.engine, args.timeout)
    engine = info["engine"]
    refuse_unusable(engine, args.stream)
    model = args.model or info["reported_model"]
    if not model:
        raise AtlasError(f"{args.url}/models names no model; pass --model")
    concurrency = args.concurrency
    if engine == "trtllm" and concurrency != 1:
        print(f"{PROG}: note: trtllm: one request at a time, so each /perf_metrics entry is that request's",
              file=sys.stderr)
        concurrency = 1
    if args.token_ids and (engine != "llamacpp" or args.prompts or args.stream):
        raise AtlasError(f"--token-ids: llama.cpp only (its /completion takes and returns token ids), our "
                         f"workload only, not streamed; got engine {engine}"
                         + (", --prompts" if args.prompts else "") + (", --stream" if args.stream else ""))
    client = Client(args.url, engine, model, api=args.api, stream=args.stream, retries=args.retries,
                    timeout=args.timeout, ignore_eos=args.ignore_eos, token_ids=args.token_ids)
    params = {"api": args.api, "model": model, "engine": engine, "stream": args.stream, "temperature": 0, "n": 1,
              "seed": SEED, "ignore_eos": args.ignore_eos, **({"token_ids": True} if args.token_ids else {})}
    phash = prompts_hash(plan)

    mf = out / MANIFEST
    old = json.loads(mf.read_text()) if mf.exists() else None
    if old is not None:
        if old.get("status") == "complete":
            raise AtlasError(f"{out} already holds a complete run; choose another --out")
        if not args.resume:
            raise AtlasError(f"{out} holds an unfinished collection (status {old.get('status')!r}); "
                             "continue it with --resume or choose another --out")
        differ = resume_differences(old, args.arm, phash, params)
        if differ:
            raise AtlasError(f"cannot resume {out}: " + "; ".join(differ) + " differ from the stored collection")
    greedy = check_greedy(client, plan)     # before anything is written: a sampling server leaves no run
    check_out(out, own_running=old is not None)
    (out / "raw").mkdir(exist_ok=True)
    raw = out / RAW
    done = read_raw(raw) if old is not None else {}
    base = {"arm": args.arm, "model": {"name": model, "hash": None},
            "workload": {"hash": plan.workload_hash, **{k: v for k, v in plan.source.items() if k != "hash"}},
            "engine": {"name": engine, "version": info["version"], "reported_model": info["reported_model"],
                       "owned_by": info["owned_by"]},
            "collect": {"endpoint": args.url, "prompts_hash": phash, "requests": plan.n_requests,
                        "params": params, "concurrency": concurrency, "retries": args.retries,
                        "timeout_s": args.timeout, "probe": greedy},
            "code": code_identity(),         # the collector's; the engine's own code is not ours to hash
            "started": (old or {}).get("started") or now(), "resumed": bool(done)}
    manifest = {"schema": 1, "status": "running", **base, "levers": {}, "telemetry": None, "shards": [],
                "rows": {"steps": 0, "events": 0}, "finished": None}
    write_json(mf, manifest)

    bar = None
    if not args.no_progress and sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=plan.n_requests, initial=len(done), unit="req", desc=args.arm, file=sys.stderr)
    stop = threading.Event()
    lock = threading.Lock()

    def check(got: dict, doc: int, turn: int, where: str) -> None:
        # parse it now: a server without per-request telemetry fails on the first answer, not the last
        rec = Record(Where(str(raw), where), doc, turn, got.get("response"), got.get("stream"), got.get("extra"))
        importlib.import_module(f"atlas_ab.ingest.{engine}").unit_from(rec)

    def run_conversation(c: Conversation) -> None:
        messages: list[dict] = []
        for t, (chunk, mt) in enumerate(zip(c.turns, c.max_tokens)):
            if stop.is_set():
                return
            user = {"role": "user", "content": chunk}
            if client.token_ids:
                user["ids"] = c.ids[t]
            if (c.doc_id, t) in done:
                got = done[(c.doc_id, t)]
                messages += [user, {"role": "assistant", "content": got["reply"],
                                    **({"ids": reply_ids(got, mt, f"{raw}: doc {c.doc_id} turn {t}")}
                                       if client.token_ids else {})}]
                continue
            where = f"doc {c.doc_id} turn {t}"
            got, attempts, secs = client.call(messages + [user], mt, where)
            try:
                check(got, c.doc_id, t, where)
            except AtlasError as e:
                raise AtlasError(f"{e} [{HINT[engine]}]") from None
            text = (got["response"].get("content") or "") if client.token_ids else reply_text(got)
            reply = {"role": "assistant", "content": text}
            if client.token_ids:      # (kept in the stored response itself: a resume reads them back)
                reply["ids"] = reply_ids(got, mt, where)
            append_raw(raw, {"doc_id": c.doc_id, "turn": t, **got, "reply": text, "attempts": attempts,
                             "seconds": round(secs, 3), "in_flight": client.in_flight.pop(where, None)}, lock)
            messages += [user, reply]
            if bar is not None:
                with lock:
                    bar.update(1)

    todo = [c for c in plan.conversations if any((c.doc_id, t) not in done for t in range(len(c.turns)))]
    waiting = Waiting(client, out=sys.stderr) if not args.no_progress else contextlib.nullcontext()
    try:
        with waiting, ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            futures = [pool.submit(run_conversation, c) for c in todo]
            finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
            errors = [f.exception() for f in futures if f.done() and f.exception() is not None]
            if errors:
                stop.set()
                wait(futures)
                raise errors[0]
    except KeyboardInterrupt:
        stop.set()
        raise AtlasError(f"interrupted: {out} stays 'running'; continue with --resume") from None
    finally:
        if bar is not None:
            bar.close()
    res = ingest(engine, [raw], out, arm=args.arm, base=base, own_running=True)
    if args.json:
        print(json.dumps(res.to_dict(), indent=2))
    else:
        print(res.summary())
    return 0


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments are one line, as every other refusal here (no usage block)."""

    def error(self, message: str):
        print(f"{PROG}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _number(kind, low: float, inclusive: bool, what: str):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(v) or v < low or (v == low and not inclusive):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v
    return parse


POSITIVE_INT = _number(int, 1, True, "an integer >= 1")
COUNT = _number(int, 0, True, "an integer >= 0")
SECONDS = _number(float, 0.0, False, "a number of seconds > 0")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--arm", required=True, help="the arm's name (the lever setting the server runs)")
    p.add_argument("--out", help="run directory (default runs/collect/<arm>)")
    p.add_argument("--engine", default="auto", choices=("auto",) + ENGINES,
                   help="the server's engine (auto: from /v1/models owned_by)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--workload", default="default", help="our workload: conf/workload/NAME.yaml (default, tiny)")
    src.add_argument("--prompts", help="the user's prompts, JSON lines ({'turns': [...]} or {'prompt': ...})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="workload override (n_docs=4, ...)")
    p.add_argument("--max-tokens", type=POSITIVE_INT, default=256, help="per turn, for --prompts without max_tokens")
    p.add_argument("--model", help="model name to send (default: the server's first /v1/models entry)")
    p.add_argument("--api", default="chat", choices=("chat", "completions"), help="endpoint to use")
    p.add_argument("--stream", action="store_true", help="stream answers (telemetry rides the final usage chunk; "
                                                         "not with sglang)")
    p.add_argument("--ignore-eos", action="store_true", help="send ignore_eos: true (exactly max_tokens per turn)")
    p.add_argument("--token-ids", action="store_true",
                   help="llama.cpp: send our workload's token ids to /completion and continue each turn with the "
                        "reply's ids (both sides see the same tokens; no text round trip)")
    p.add_argument("--concurrency", type=POSITIVE_INT, default=8,
                   help="requests in flight: one per document, its turns in order; each answer records how many "
                        "were in flight when it was sent (in_flight), the load level an engine's K ladder reads")
    p.add_argument("--retries", type=COUNT, default=RETRIES,
                   help=f"retries per request on connection errors, 429, 5xx (default {RETRIES}; a timeout is "
                        "not retried)")
    p.add_argument("--timeout", type=SECONDS, default=TIMEOUT_S,
                   help=f"seconds a request may wait for its answer (default {TIMEOUT_S:g})")
    p.add_argument("--resume", action="store_true", help="continue an interrupted collection in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar, no waiting lines")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    args.out = args.out or str(Path("runs/collect") / args.arm)
    try:
        return collect(args)
    except AtlasError as e:
        print(f"{PROG}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

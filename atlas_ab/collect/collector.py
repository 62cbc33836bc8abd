"""One collection, start to end: the plan, the server's probe, the manifest, the request loop
(`send_all`: documents in parallel, turns in order, every answer appended and fsync'd to
raw/responses.jsonl as it arrives, so `--resume` continues where it stopped), then the ingest
of the raw answers into the run directory.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.collect.client import (
    HINT,
    PROG,
    SEED,
    Client,
    Waiting,
    check_greedy,
    probe,
    refuse_unusable,
    reply_ids,
    reply_text,
)
from atlas_ab.collect.plan import Conversation, Plan, prompts_hash, prompts_plan, workload_plan

RAW = "raw/responses.jsonl"


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


# ---- the requests --------------------------------------------------------------------------

def send_all(client: Client, plan: Plan, done: dict, raw: Path, concurrency: int, bar=None,
             waiting: bool = True) -> None:
    """The request loop: every turn of `plan` not in `done`, `concurrency` documents at a time and
    each document's turns in order (turn t's request carries the replies to turns < t), each
    answer checked against its engine's parser and appended to `raw` as it arrives. The first
    failure stops the documents still in flight and is raised."""
    from atlas_ab.ingest.engine_units import Where
    from atlas_ab.ingest.responses import Record

    engine = client.engine
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
            text = reply_text(got)
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
    progress = Waiting(client, out=sys.stderr) if waiting else contextlib.nullcontext()
    try:
        with progress, ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            futures = [pool.submit(run_conversation, c) for c in todo]
            wait(futures, return_when=FIRST_EXCEPTION)
            errors = [f.exception() for f in futures if f.done() and f.exception() is not None]
            if errors:
                stop.set()
                wait(futures)
                raise errors[0]
    except KeyboardInterrupt:
        stop.set()
        raise


def collect(args) -> int:
    from atlas_ab.atomic import write_json
    from atlas_ab.clock import now
    from atlas_ab.ingest import ingest
    from atlas_ab.ingest.write import check_out
    from atlas_ab.run.provenance import code_identity
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
    if args.model and info.get("models") and args.model not in info["models"]:
        raise AtlasError(f"the server at {args.url} serves {info['models']}, not --model {args.model!r}: "
                         "another model than the one asked for")
    if not model:
        raise AtlasError(f"{args.url}/models names no model; pass --model")
    concurrency = args.concurrency
    if engine == "trtllm" and concurrency != 1:
        print(f"{PROG}: note: trtllm: one request at a time, so each /perf_metrics entry is that request's",
              file=sys.stderr)
        concurrency = 1
    if args.token_ids and (engine not in ("llamacpp", "vllm") or args.prompts or args.stream):
        raise AtlasError(f"--token-ids: llama.cpp or vLLM only (their completions take and return token ids), our "
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
    try:
        send_all(client, plan, done, raw, concurrency, bar, waiting=not args.no_progress)
    except KeyboardInterrupt:
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

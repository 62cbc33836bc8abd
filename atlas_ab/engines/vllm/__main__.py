"""`python -m atlas_ab.engines.vllm`: our model served by vLLM with its own speculative decoding.

  serve   export the model (once, cached) into MiMo's layout and start vLLM's OpenAI server on
          127.0.0.1 with speculative decoding, per-request spec-decode metrics and /metrics; returns
          when it answers; prints the URL (last line) for `python -m atlas_ab.collect --url`
  stop    stop the server on --port (its log stays: STATE_ROOT/<port>/server.log)
  export  write the MiMo directory only (--out), e.g. to serve it from a GPU vLLM of your own
  status  the recorded servers, alive or not

The speculation, one of: --method mtp|ngram|suffix|draft_model|eagle3 with --k (and the method's keys
with --set key=value), or --speculative-config FILE|JSON: vLLM's own object, served exactly as
written (what `python -m atlas_ab.analysis ladder` writes), or --no-spec. With eagle3 (--head: the
shipped head) the target is served as its trunk alone, a Qwen2 directory, whose forward hands the
head its aux hidden states (MiMo's does not).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.engines.vllm import export as exp, server
from atlas_ab.errors import one_line_parser

PROG = "atlas_ab.engines.vllm"
METHODS = ("mtp", "ngram", "suffix", "draft_model", "eagle3")
MODELS = {"default": "atlas_ab/models/default", "draft": "atlas_ab/models/draft", "eagle3": "atlas_ab/models/eagle3"}




def model_dir(name: str) -> Path:
    """A shipped model's name or a checkpoint directory."""
    from atlas_ab.config.paths import PACKAGE_ROOT
    d = PACKAGE_ROOT / MODELS[name] if name in MODELS else Path(name)
    if not (d / "config.json").is_file():
        raise AtlasError(f"--model {name}: not a shipped model ({', '.join(MODELS)}) nor a checkpoint directory")
    return d


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def speculative_config(args) -> dict | None:
    """vLLM's --speculative-config object from the flags; refused in one line where it cannot be."""
    if args.no_spec:
        return None
    if args.speculative_config:
        text = args.speculative_config
        src = Path(text)
        if not text.lstrip().startswith("{"):
            if not src.is_file():
                raise AtlasError(f"--speculative-config {text}: no such file (and not a JSON object)")
            text = src.read_text()
        try:
            cfg = json.loads(text)
        except ValueError as e:
            raise AtlasError(f"--speculative-config: not JSON ({e})") from None
        if not isinstance(cfg, dict) or "method" not in cfg:
            raise AtlasError("--speculative-config: expected vLLM's object with a 'method' key "
                             f"(got keys {sorted(cfg) if isinstance(cfg, dict) else type(cfg).__name__})")
        return cfg
    cfg = {"method": args.method, "num_speculative_tokens": args.k}
    if args.method == "draft_model":
        cfg["model"] = str(model_dir(args.draft))       # a plain Llama: vLLM's own Llama serves it as it is
    elif args.method == "eagle3":
        cfg["model"] = str(model_dir(args.head))        # written in the layout vLLM's eagle3 loads
    for kv in args.set or []:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise AtlasError(f"--set {kv!r}: expected KEY=VALUE")
        cfg[k] = _value(v)
    return cfg


def build_parser() -> argparse.ArgumentParser:
    p = one_line_parser(PROG, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=p.subparser_class)
    s = sub.add_parser("serve", help="export and serve a model with speculative decoding")
    s.add_argument("--model", default="default", help="shipped model name (default, draft) or checkpoint dir")
    s.add_argument("--served-name", default=None, help="the name /v1/models reports (default: --model's name)")
    s.add_argument("--port", type=int, default=8011)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--speculative-config", help="vLLM's --speculative-config object: a file or inline JSON")
    g.add_argument("--method", choices=METHODS, default="mtp")
    g.add_argument("--no-spec", action="store_true", help="no speculative decoding")
    s.add_argument("--k", type=int, default=2, help="num_speculative_tokens (with --method)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="another key of the method's config")
    s.add_argument("--draft", default="draft", help="the draft model for --method draft_model")
    s.add_argument("--head", default="eagle3", help="the EAGLE-3 head for --method eagle3 (the shipped one)")
    s.add_argument("--metrics", choices=server.METRICS, default="detailed",
                   help="--per-request-spec-decode-metrics (none: the engine's telemetry off)")
    s.add_argument("--prefix-caching", action="store_true", help="vLLM's prefix caching on (off by default)")
    s.add_argument("--timeout", type=float, default=server.START_TIMEOUT_S, help="seconds to wait for /health")
    s.add_argument("--json", action="store_true", help="print the server's state as JSON")
    t = sub.add_parser("stop", help="stop the server on --port")
    t.add_argument("--port", type=int, default=8011)
    e = sub.add_parser("export", help="write the MiMo directory vLLM serves")
    e.add_argument("--model", default="default")
    e.add_argument("--out", required=True)
    sub.add_parser("status", help="the recorded servers")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        if args.cmd == "serve":
            if args.k < 1:
                raise AtlasError(f"--k {args.k}: expected an integer >= 1")
            spec_cfg = speculative_config(args)
            src = model_dir(args.model)
            # a drafter with its own weights reads the target's aux hidden states: the trunk alone, as Qwen2
            info = exp.exported(src, server.CACHE / "models", mtp=(spec_cfg or {}).get("method") != "eagle3")
            name = args.served_name or (args.model if args.model in MODELS else src.name)
            spec = server.ServerSpec(info["path"], served_name=name, speculative=spec_cfg, port=args.port,
                                     metrics=args.metrics, prefix_caching=args.prefix_caching)
            state = server.serve(spec, args.timeout)
            state["export"] = info
            if args.json:
                print(json.dumps(state, indent=2))
            else:
                print(f"{PROG}: serving {name} ({info['hash'][:19]}) with "
                      f"{json.dumps(spec_cfg) if spec_cfg else 'no speculation'} in {state['ready_s']} s; "
                      f"log {state['log']}", file=sys.stderr)
                print(state["url"])
        elif args.cmd == "stop":
            st = server.stop(args.port)
            if st is None:
                raise AtlasError(f"no server recorded on port {args.port} ({server.state_dir(args.port)})")
            print(f"stopped pid {st['pid']} (log {st['log']})")
        elif args.cmd == "export":
            print(json.dumps(exp.export(model_dir(args.model), args.out), indent=2))
        elif args.cmd == "status":
            for f in sorted(server.STATE_ROOT.glob("*/server.json")):
                st = json.loads(f.read_text())
                alive = server.alive(int(st["pid"]))
                print(f"{st['url']}  pid {st['pid']}  {'alive' if alive else 'gone'}  log {st['log']}")
        return 0
    except AtlasError as e:
        print(f"{PROG}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Every `python -m atlas_ab...` command line in README.md, CONTRIBUTING.md and docs/*.md names a module
that exists and passes what its command line accepts: an argparse module's flags (its own parser, run
up to parse_args and stopped there), Hydra's overrides for `python -m atlas_ab` (composed as the CLI
composes them, then the project's strict key check). Commands in code blocks and in inline code count.

Usage notation is read as usage: `[--opt X]` is tried without and with, `a|b` and `{a,b}` each
alternative, `FILE...` one value; placeholders (RUN, RUN_A, <date>, {tmp}) are positional values, and
`+arm=NAME` checks only that the group exists; `myengine` is the engine CONTRIBUTING.md adds.
docs/faults.md's rows are bad input on purpose: their Hydra overrides are not composed
(tests/run/test_faults.py runs each and checks its one line)."""
from __future__ import annotations

import argparse
import functools
import itertools
import re
import runpy
import shlex
import sys
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
FAULTS = ROOT / "docs" / "faults.md"
CMD = re.compile(r"python3? -m atlas_ab\S*")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)   # inline code, within a paragraph
END = re.compile(r"\s(?:\||;|&&|>|2>|#)(?:\s|$)|\);|\)$")                         # where the command ends
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*|<[^>]*>|\{[a-z_]+\})$")              # RUN, <date>, {tmp}
#: the engine CONTRIBUTING.md walks through adding: its commands work once it is added
HYPOTHETICAL = {"myengine"}
HYDRA_FLAGS = {"-m": 0, "--multirun": 0, "--cfg": 1, "-c": 1, "--info": 0, "--help": 0, "-h": 0, "--resolve": 0}


def _commands(path: Path) -> list[tuple[int, str]]:
    """(line, command) of every `python -m atlas_ab...` in the file's code blocks and inline code."""
    text, out = path.read_text(), []
    fenced = []
    for m in FENCE.finditer(text):
        fenced.append(m.span())
        body = re.sub(r"\\\n\s*", " ", m.group(1))                 # continuation lines are one command
        first = text.count("\n", 0, m.start(1)) + 1
        for i, line in enumerate(body.splitlines()):
            out += [(first + i, line[c.start():]) for c in CMD.finditer(line)][:1]
    for m in SPAN.finditer(text):
        if any(a <= m.start() < b for a, b in fenced):
            continue
        span = " ".join(m.group(2).split())
        c = CMD.search(span)
        if c and c.start() == 0:
            out.append((text.count("\n", 0, m.start()) + 1, span))
    return [(n, _until_end(c)) for n, c in out]


def _until_end(cmd: str) -> str:
    """The command up to a pipe, `;`, `&&`, a redirection or a comment (not a `|` inside `[a | b]`)."""
    masked = re.sub(r"\[[^\[\]]*\]", lambda m: "_" * len(m.group()), cmd)
    m = END.search(masked)
    return (cmd[:m.start()] if m else cmd).strip()


def _variants(cmd: str) -> list[list[str]]:
    """Every concrete argv the usage line stands for (its optional groups and alternatives)."""
    groups = re.findall(r"(?<![=\w])\[([^\[\]]*)\]", cmd)
    skeleton = re.sub(r"(?<![=\w])\[[^\[\]]*\]", "\0", cmd)
    options = [[""] + [alt.strip() for alt in g.split(" | ")] for g in groups]
    out = []
    for choice in itertools.product(*options):
        line = skeleton
        for c in choice:
            line = line.replace("\0", c, 1)
        line = re.sub(r"<[^<>]*>", lambda m: m.group().replace(" ", "_"), line)     # <its dir>: one value
        tokens = [t.removesuffix("...") for t in shlex.split(line)]
        alts = [_alternatives(t) for t in tokens]
        out += [list(v) for v in itertools.product(*alts)]
    return out


def _alternatives(token: str) -> list[str]:
    m = re.fullmatch(r"([^{}]*)\{([^{}]*,[^{}]*)\}([^{}]*)", token)
    if m:                                                          # {vllm,sglang}: each one
        return [m.group(1) + x + m.group(3) for x in m.group(2).split(",")]
    if "|" in token and "=" not in token and not token.startswith("-"):
        return token.split("|")                                    # vllm-detailed|histogram
    return [token]


class _Parsed(BaseException):
    """Raised from parse_args with what it parsed: the module's work never starts."""

    def __init__(self, ns):
        self.ns = ns


def _argparse_error(module: str, argv: list[str], monkeypatch, capsys) -> str | None:
    real = argparse.ArgumentParser.parse_args

    def stop(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    monkeypatch.setattr(sys, "argv", [module, *argv])
    try:
        with warnings.catch_warnings():                            # a module imported before runs again as __main__
            warnings.simplefilter("ignore", RuntimeWarning)
            runpy.run_module(module, run_name="__main__", alter_sys=False)
    except _Parsed as p:
        overrides = getattr(p.ns, "overrides", None)           # levers env: Hydra overrides as positionals
        return _hydra_error([o for o in overrides if o != "overrides"]) if overrides else None
    except SystemExit as e:
        return f"exit {e.code}: {capsys.readouterr().err.strip().splitlines()[-1:]}"
    except ImportError as e:
        return f"no module: {e}"
    finally:
        monkeypatch.undo()
    return "ran without parsing a command line"


def _hydra_error(argv: list[str]) -> str | None:
    return _hydra_error_of(tuple(argv))


@functools.lru_cache(maxsize=None)
def _hydra_error_of(argv: tuple[str, ...]) -> str | None:      # a compose costs ~0.2 s; docs repeat commands
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from atlas_ab.config.hydra_schema import CONF_DIR, check_keys

    overrides, skip = [], 0
    for t in argv:
        if skip:
            skip -= 1
        elif t in HYDRA_FLAGS:
            skip = HYDRA_FLAGS[t]
        elif PLACEHOLDER.match(t):
            continue                                               # OVERRIDES: the user's, in prose
        elif "=" not in t:
            return f"{t!r} is not an override"
        else:
            overrides.append(re.sub(r"=<[^<>]*>$", "=x", t))           # hydra.sweep.dir=<its dir>: a value
    sweeps = []
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    for o in parsed:
        key = o.get_key_element()
        values = [o.value()] if not o.is_sweep_override() else list(getattr(o.value(), "list", None) or [None])
        if o.is_sweep_override() and o.value().__class__.__name__ == "Glob":
            values = [None]                                        # glob(*): the group's options, not one value
        group = key.lstrip("+~").split("@")[0]
        if "." not in group and (CONF_DIR / group).is_dir():      # a config group: its option must exist
            opts = {p.stem for p in (CONF_DIR / group).glob("*.yaml")}
            for v in values:
                if v is not None and not PLACEHOLDER.match(str(v)) and str(v) not in opts:
                    return f"{key}={v}: no such option (conf/{group}/)"
            values = [v for v in values if v is not None and not PLACEHOLDER.match(str(v))][:1]
        sweeps.append([f"{key}={v}" for v in values] if values else [])
    for combo in itertools.product(*[s or [None] for s in sweeps]):
        try:
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
                cfg = compose("config", overrides=[c for c in combo if c], return_hydra_config=True)
            check_keys(OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "hydra"]))
        except Exception as e:  # noqa: BLE001  (the composition's own message is the finding)
            return f"{' '.join(c for c in combo if c)}: {type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def _all() -> list[tuple[str, int, str]]:
    return [(str(p.relative_to(ROOT)), n, c) for p in DOCS for n, c in _commands(p)]


def test_the_commands_are_found():
    found = _all()
    assert len(found) > 100
    where = {f for f, _, _ in found}
    assert {"README.md", "CONTRIBUTING.md", "docs/ci_gate.md", "docs/ingest.md", "docs/frontend.md"} <= where
    # a command wrapped over two lines of prose is one command
    assert ("docs/analysis.md", "python -m atlas_ab.analysis ladder RUNS... --out DIR") in {(f, c) for f, _, c in found}


def test_usage_notation_is_expanded():
    v = _variants("python -m atlas_ab.collect --url U --arm A [--out RUN] [--engine auto|vllm]")
    assert ["python", "-m", "atlas_ab.collect", "--url", "U", "--arm", "A", "--engine", "vllm"] in v
    assert len(v) == 6
    assert _variants("python -m atlas_ab.analysis ingest {vllm,sglang} FILE... --out RUN") == [
        ["python", "-m", "atlas_ab.analysis", "ingest", x, "FILE", "--out", "RUN"] for x in ("vllm", "sglang")]
    assert _variants("python -m atlas_ab +study=x study.widths=[1,2]") == [
        ["python", "-m", "atlas_ab", "+study=x", "study.widths=[1,2]"]]


def test_a_wrong_flag_a_wrong_key_and_a_missing_module_are_found(monkeypatch, capsys):
    assert _argparse_error("atlas_ab.analysis", ["compare", "A", "B", "--metrik", "p1"], monkeypatch, capsys)
    assert _argparse_error("atlas_ab.analysis", ["compare", "A", "B", "--metric", "p1"], monkeypatch, capsys) is None
    assert "no module" in _argparse_error("atlas_ab.ingest.collect", ["--url", "U"], monkeypatch, capsys)
    assert "arm.refeeed" in _hydra_error(["+arm=catchup_on", "+arm.refeeed=true"])
    assert "no such option" in _hydra_error(["+arm=nosuch"])
    assert _hydra_error(["-m", "+arm=baseline,refeed_on", "runner.batch_width=4"]) is None


@pytest.mark.parametrize("doc,line,cmd", _all(), ids=lambda x: x if isinstance(x, str) and len(x) < 40 else None)
def test_every_documented_command_parses(doc, line, cmd, monkeypatch, capsys):
    for argv in _variants(cmd):
        module, args = argv[2], argv[3:]
        if HYPOTHETICAL & set(args):
            continue
        if args == ["ARGS"]:                                       # the schema of a command, not a command
            args = ["--help"] if module != "atlas_ab" else []
        if module == "atlas_ab":
            err = None if doc == "docs/faults.md" else _hydra_error(args)
        elif args == ["--help"]:
            err = _argparse_error(module, [], monkeypatch, capsys)
            err = None if err and err.startswith("exit 2") else err   # exists, and wants arguments
        else:
            err = _argparse_error(module, args, monkeypatch, capsys)
        assert err is None, f"{doc}:{line}: {' '.join(argv)}: {err}"

"""Bad input becomes one line: the single formatter every entry point uses.

`AtlasError` (defined in `atlas_ab/__init__.py`) is raised for input the user can fix; its
message already names the thing that is wrong. `one_line` turns that, and the composition
errors Hydra/OmegaConf raise for a bad config or override, and OS errors, into one line; for
anything else (a bug) it returns None and the caller lets the traceback through.
Torch-free; Hydra is imported only when the exception might be one of its own.
"""
from __future__ import annotations

import argparse
import sys
from functools import partial
from typing import Optional

from atlas_ab import AtlasError


def first_line(x) -> str:
    """The first non-empty line of a message or exception, stripped (the type's name if none)."""
    lines = [ln.strip() for ln in str(x).strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(x).__name__


def _atlas_cause(ex: BaseException) -> Optional[AtlasError]:
    """The AtlasError a Hydra/OmegaConf error wraps (a resolver of ours raised it), if any."""
    seen = set()
    x = ex.__cause__ or ex.__context__
    while x is not None and id(x) not in seen:
        if isinstance(x, AtlasError):
            return x
        seen.add(id(x))
        x = x.__cause__ or x.__context__
    return None


def one_line(ex: BaseException) -> Optional[str]:
    if isinstance(ex, AtlasError):
        return " ".join(str(ex).split())
    if type(ex).__module__.split(".")[0] not in ("hydra", "omegaconf"):
        if isinstance(ex, OSError):       # (Hydra's MissingConfigException is an IOError too)
            where = f" {ex.filename}" if ex.filename is not None else ""
            return f"cannot write{where}: {ex.strerror or type(ex).__name__}"
        return None
    inner = _atlas_cause(ex)
    if inner is not None:                 # "AtlasError raised while resolving interpolation: ..."
        return one_line(inner)
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

    from atlas_ab.config.hydra_schema import GROUPS, field_type, unknown_key

    if isinstance(ex, MissingConfigException):
        missing = getattr(ex, "missing_cfg_file", None) or ""
        options = getattr(ex, "options", None)
        if "/" in str(missing) and options is not None:
            group, name = str(missing).rsplit("/", 1)
            return f"unknown {group} {name!r} (available: {', '.join(sorted(options))})"
        return first_line(ex)
    cause = ex.__cause__ or ex.__context__
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and cause.full_key:
        # an unknown key (without `+`; with `+`, hydra_schema.check_keys catches it)
        group, _, key = str(cause.full_key).partition(".")
        return unknown_key(group if key and group in GROUPS else None, key or group)
    if isinstance(cause, ValidationError) and cause.full_key:
        group, _, key = str(cause.full_key).partition(".")
        want = field_type(group, key)
        if want:
            return f"{cause.full_key}={cause.value!r}: expected {want}"
    msg = first_line(ex)
    if isinstance(cause, OmegaConfBaseException):
        c = first_line(cause)
        full_key = getattr(cause, "full_key", None)
        if full_key and full_key not in c:
            c = f"{c} (key: {full_key})"
        if c not in msg:
            msg = f"{msg}: {c}"
    return msg


def closed_stdout() -> int:
    """After a BrokenPipeError (`... | head` stopped reading): point stdout at /dev/null so the
    interpreter's final flush does not raise again, and exit 0, quietly (a reader that has
    read enough is not an error)."""
    import os
    import sys

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments are one line, `NAME: error: ...` and exit 2, as every other refusal (no usage block)."""

    def __init__(self, *args, error_name: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.error_name = error_name or self.prog

    def error(self, message: str):
        print(f"{self.error_name}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def one_line_parser(name: str, **kwargs) -> OneLineParser:
    """A top-level parser named `python -m NAME` whose errors, and its subcommands' (`add_subparsers(
    parser_class=p.subparser_class)`), start with NAME."""
    p = OneLineParser(prog=f"python -m {name}", error_name=name, **kwargs)
    p.subparser_class = partial(OneLineParser, error_name=name)
    return p

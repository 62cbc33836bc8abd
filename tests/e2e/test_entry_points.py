"""pyproject's console scripts: each resolves to a callable that a console script can call bare
(setuptools' wrapper calls `main()` with no argument and exits with what it returns)."""
import importlib
import inspect
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_the_console_scripts_beside_python_m():
    assert SCRIPTS == {"atlas-ab": "atlas_ab.__main__:main",
                       "atlas-ab-analysis": "atlas_ab.analysis.__main__:main",
                       "atlas-ab-collect": "atlas_ab.collect.cli:main",
                       "atlas-ab-levers": "atlas_ab.config.levers:main"}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_entry_point_is_a_callable_needing_no_argument(name):
    module, _, attr = SCRIPTS[name].partition(":")
    fn = getattr(importlib.import_module(module), attr)
    assert callable(fn)
    required = [p.name for p in inspect.signature(fn).parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert required == [], f"{name}: main() needs {required}"


def test_levers_entry_point_reads_sys_argv(monkeypatch, capsys):
    from atlas_ab.config import levers

    monkeypatch.setattr(sys, "argv", ["atlas-ab-levers", "table"])
    assert levers.main() == 0
    assert "ATLAS_MTP_REFEED_ACCEPTED" in capsys.readouterr().out

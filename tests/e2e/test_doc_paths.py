"""Every file of this repository that README.md, CONTRIBUTING.md and docs/*.md name exists: paths from
the root (`scripts/gpu.sh`, `bench/RESULTS.md`, `atlas_ab/run/store.py`), paths inside the package
(`runtime/fusion.py`, `kernels/attention.py`) and the README's "What flows where" tree, module by
module. Placeholders (NAME, `my_lever_on`, `myengine`) and other projects' paths (vllm/...) are not
this repository's files. A module moved is a name to update here and in the docs together."""
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "atlas_ab"
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"(?<![\w./<-])((?:[\w.*{},-]+/)+[\w.*{},-]+\.(?:py|sh|md|yaml|json|toml))(?![\w/])")
TOP = {"atlas_ab", "scripts", "bench", "tests", "docs", "analysis", "conf", ".ci"}
#: the roots of other projects' source trees the docs cite (vllm/v1/..., tensorrt_llm/serve/...)
OTHERS = {"vllm", "v1", "tensorrt_llm", "python", "sglang", "test", "conversion", "tools", "stdlib"}
#: names that stand for a file the reader makes (CONTRIBUTING.md's walk-throughs, docs' examples)
PLACEHOLDER = re.compile(r"\b(?:[A-Z][A-Z_]+|my_\w+|myengine|mine)\.\w+$")


def _expand(path: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", path)
    if m is None:
        return [path]
    return [x for alt in m.group(1).split(",") for x in _expand(path[:m.start()] + alt + path[m.end():])]


def _candidates(path: str) -> list[Path] | None:
    """Where the path can be in this repository; None for another project's path."""
    first = path.split("/", 1)[0]
    if first in OTHERS:
        return None
    where = ([ROOT / path] if first in TOP else []) + ([PKG / path] if (PKG / first).is_dir() else [])
    if where:                                                      # analysis/x.py: the package's, or the reports'
        return where
    inside = [d / path for d in PKG.iterdir() if d.is_dir() and (d / first).is_dir()]
    return inside or None                                          # runtime/kernels/... named from runtime's side


def _exists(path: str) -> bool | None:
    found = []
    for p in _expand(path):
        where = _candidates(p)
        if where is None:
            return None
        found.append(any(list(w.parent.glob(w.name)) if "*" in w.name else w.exists() for w in where))
    return all(found)


def _named() -> list[tuple[str, int, str]]:
    out = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            out += [(str(doc.relative_to(ROOT)), n, m.group(1)) for m in PATH.finditer(line)
                    if not PLACEHOLDER.search(m.group(1))]
    return out


def _flows() -> list[tuple[str, str]]:
    """(directory, module) of every module the README's "What flows where" tree names."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^## What flows where\n\n```\n(.*?)^```", text, re.S | re.M).group(1)
    out, here = [], None
    for line in block.splitlines():
        m = re.match(r"\s*(?:->\s*)?([a-z_]+)/\s", line)
        if m:
            here, line = m.group(1), line[m.end():]
        out += [(here, name) for name in re.findall(r"(?<![\w./])([\w/]+\.py)\b", line)]
    return out


def test_every_named_file_exists():
    named = _named()
    assert len(named) > 50
    checked = [(doc, n, p) for doc, n, p in named if _exists(p) is not None]
    assert len(checked) > 40
    assert [(doc, n, p) for doc, n, p in checked if not _exists(p)] == []


def test_every_module_of_the_flows_tree_exists():
    flows = _flows()
    assert len(flows) > 40
    missing = [(d, name) for d, name in flows
               if not (PKG / d / name).exists() and not (PKG / name).exists()]
    assert missing == []


def test_the_checks_see_a_wrong_name():
    assert _exists("atlas_ab/run/store.py") and _exists("runtime/fusion.py") and _exists("kernels/attention.py")
    assert _exists("bench/results/e2e_h200_2026-12-03{a,b}.json")
    assert _exists("config/store.py") is False and _exists("scripts/gpu_bench.sh") is False
    assert _exists("vllm/v1/spec_decode/metrics.py") is None
    assert list(itertools.chain(PLACEHOLDER.findall("conf/arm/NAME.yaml"), PLACEHOLDER.findall("ingest/myengine.py")))

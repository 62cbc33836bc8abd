"""Pointers into the benchmark results hold: every `bench/RESULTS.md, "<section>"` named in the tree
is a section there, every `bench/results/<file>` named (a glob or `{a,b}` counts) is a file there,
and every file there is cited by bench/RESULTS.md (bench/results holds only the raw outputs its
figures cite; older ones live in git history)."""
import fnmatch
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "RESULTS.md"
RAW = ROOT / "bench" / "results"

SECTION = re.compile(r"RESULTS\.md`?,\s*\"([^\"]+)\"")
THIS = "tests/e2e/test_bench_pointers.py"              # its docstring names the patterns it reads
TEXT = (".py", ".md", ".yaml", ".sh", ".toml", ".txt", ".cfg")
FILE = re.compile(r"results/([A-Za-z0-9_.*?\[\]{},-]+)")


def _tree() -> dict[str, str]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    out = {}
    for name in names:
        path = ROOT / name
        if name.startswith("bench/results/") or name == THIS or path.suffix not in TEXT or not path.is_file():
            continue
        out[name] = path.read_text(encoding="utf-8", errors="replace")
    return out


def _expand(pattern: str) -> list[str]:
    m = re.search(r"\{([^}]*)\}", pattern)
    if m is None:
        return [pattern]
    return [x for alt in m.group(1).split(",") for x in _expand(pattern[:m.start()] + alt + pattern[m.end():])]


def _named_files(name: str, text: str):
    """(pattern, files it matches) of every raw file a tracked file names."""
    have = sorted(p.name for p in RAW.iterdir())
    for m in FILE.finditer(text):
        start = text[max(0, m.start() - 6):m.start()]
        if name != "bench/RESULTS.md" and not start.endswith("bench/"):
            continue                                  # `results/` elsewhere is some other folder
        for pattern in _expand(m.group(1).rstrip(".,)")):
            yield pattern, [n for n in have if fnmatch.fnmatchcase(n, pattern)]


def test_every_results_section_named_in_the_tree_exists():
    headings = [ln.lstrip("#").strip().lower() for ln in RESULTS.read_text().splitlines() if ln.startswith("#")]
    named = [(name, " ".join(s.replace("#", " ").split())) for name, text in _tree().items()
             for s in SECTION.findall(text)]                # a title wrapped over comment lines is one title
    missing = [(name, s) for name, s in named if not any(s.lower() in h for h in headings)]
    assert len(named) > 10
    assert missing == []


def test_every_raw_file_named_exists():
    missing = [(name, pattern) for name, text in _tree().items()
               for pattern, hits in _named_files(name, text) if not hits]
    assert missing == []


def test_every_raw_file_is_cited_by_results():
    cited = {hit for _, hits in _named_files("bench/RESULTS.md", RESULTS.read_text()) for hit in hits}
    assert len(cited) > 10
    assert sorted(p.name for p in RAW.iterdir() if p.name not in cited) == []


def test_results_is_one_page_of_current_figures():
    text = RESULTS.read_text()
    assert len(text.splitlines()) <= 300
    assert not re.search(r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth) session\b", text, re.I)

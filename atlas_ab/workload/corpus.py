"""The offline corpus: text every Python install has, built on the fly.

Two sources, no download and no third-party text:

* ``stdlib``: the ``.py`` source of the running interpreter's standard library
  (``sysconfig`` stdlib dir), sorted by relative path, test folders
  (``test``, ``tests``, ``idle_test``), ``site-packages``, the install-specific
  ``config-*`` folder and ``_sysconfigdata_*`` module, and ``pydoc_data`` (that is
  the prose source below) left out; decoded as UTF-8 with bad bytes skipped.
* ``pydoc``: the language reference prose in ``pydoc_data.topics`` (79 topics).

The train/held-out split is per document and fixed by the document's name alone
(sha256 of ``"<source>/<relative path>"``), so a file that exists on two machines
lands on the same side on both. The stdlib differs between Python versions, so
`CorpusInfo` records the version, the file count and a sha256 over the content.
"""
from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.config.structured import CORPUS_SOURCES as SOURCES  # the names `workload.corpus` takes

HELDOUT_PER_MILLE = 50          # ~5% of documents are held out
SPLIT_RULE = "heldout iff int(sha256(name)[:8], 16) % 1000 < 50"

_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "pydoc_data"}


@dataclass(frozen=True)
class CorpusDoc:
    name: str       # "<source>/<relative path or topic>", e.g. "stdlib/json/decoder.py"
    source: str     # stdlib | pydoc
    split: str      # train | heldout
    text: str


@dataclass(frozen=True)
class CorpusInfo:
    python_version: str
    sources: tuple
    n_files: int
    n_train: int
    n_heldout: int
    n_chars: int
    sha256: str            # over every (name, text) in order; split is a function of name
    split_rule: str

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sources"] = list(self.sources)
        return d


@dataclass(frozen=True)
class Corpus:
    docs: tuple     # of CorpusDoc, sorted by name within each source
    info: CorpusInfo

    def select(self, source: str | None = None, split: str | None = None) -> list[CorpusDoc]:
        return [d for d in self.docs
                if (source is None or d.source == source) and (split is None or d.split == split)]


def split_of(name: str) -> str:
    """The fixed document-level split: a function of the document's name only."""
    h = int(hashlib.sha256(name.encode("utf-8")).hexdigest()[:8], 16)
    return "heldout" if h % 1000 < HELDOUT_PER_MILLE else "train"


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _keep(rel: Path) -> bool:
    parts = rel.parts
    if any(p in _SKIP_DIRS or p.startswith("config-") for p in parts[:-1]):
        return False
    return not parts[-1].startswith("_sysconfigdata")


def _stdlib_files(root: Path) -> list[Path]:
    """Every .py under root, pruning the skipped folders while walking (site-packages
    alone holds tens of thousands of entries that rglob would visit and drop)."""
    found = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in _SKIP_DIRS and not x.startswith("config-")]
        found += [Path(d) / f for f in files if f.endswith(".py")]
    return found


def _stdlib_docs() -> list[tuple[str, str]]:
    root = stdlib_dir()
    out = []
    for p in sorted(_stdlib_files(root), key=lambda q: q.relative_to(root).as_posix()):
        rel = p.relative_to(root)
        if not _keep(rel) or not p.is_file():
            continue
        text = p.read_bytes().decode("utf-8", errors="ignore")
        if text.strip():
            out.append((f"stdlib/{rel.as_posix()}", text))
    return out


def _pydoc_docs() -> list[tuple[str, str]]:
    from pydoc_data import topics
    return [(f"pydoc/{k}", topics.topics[k]) for k in sorted(topics.topics) if topics.topics[k].strip()]


@lru_cache(maxsize=4)
def build_corpus(sources: tuple = SOURCES) -> Corpus:
    """Build the corpus (deterministic for a given interpreter; cached per process)."""
    sources = tuple(sources)
    bad = [s for s in sources if s not in SOURCES]
    if bad or not sources:
        raise AtlasError(f"corpus sources {list(sources)} must be a non-empty subset of {list(SOURCES)}")
    docs = []
    h = hashlib.sha256()
    for src in sources:
        pairs = _stdlib_docs() if src == "stdlib" else _pydoc_docs()
        for name, text in pairs:
            docs.append(CorpusDoc(name=name, source=src, split=split_of(name), text=text))
            h.update(name.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0")
    n_held = sum(d.split == "heldout" for d in docs)
    info = CorpusInfo(
        python_version=".".join(map(str, sys.version_info[:3])),
        sources=sources,
        n_files=len(docs),
        n_train=len(docs) - n_held,
        n_heldout=n_held,
        n_chars=sum(len(d.text) for d in docs),
        sha256="sha256:" + h.hexdigest(),
        split_rule=SPLIT_RULE,
    )
    return Corpus(docs=tuple(docs), info=info)


def file_sha256(path) -> str:
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()

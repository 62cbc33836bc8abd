"""Corpus -> documents x turns: the deterministic, hashed workload of a study.

A `Document` is ``cfg.turns`` consecutive chunks of ``cfg.chunk_tokens`` tokens
from one file of the chosen corpus source and split (held-out by default). At
turn t the runner appends chunk t to the sequence's context and then generates
exactly ``cfg.gen_tokens`` tokens; the workload only supplies the chunks.

Selection is a function of ``cfg.seed`` and the file names alone: the eligible
files (those with at least turns * chunk_tokens tokens) are ordered by
sha256(f"{seed}:{name}") and the first ``n_docs`` are taken, each at a
seed-derived start offset. When fewer files are long enough than ``n_docs``,
several disjoint windows are cut from the longest files instead. Windows of one file
share its content, so they are not independent documents: ``info`` then says so under
``selection`` and carries ``cluster_unit: "source file"`` and ``doc_cluster`` (the source
file of each doc_id), and the analysis clusters its sds by source file instead of by
document (and reports how many clusters that leaves).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from atlas_ab import AtlasError
from atlas_ab.config.structured import WorkloadConfig, validate_workload
from atlas_ab.workload.corpus import build_corpus, file_sha256


@dataclass
class Document:
    doc_id: int
    name: str                       # "<source>/<path>@<start token>"
    chunks: list[list[int]]         # turns x chunk_tokens token ids


@dataclass
class Workload:
    docs: list[Document]
    gen_tokens: int
    hash: str                       # "sha256:..." over the cfg and every token id
    info: dict = field(default_factory=dict)

    @property
    def turns(self) -> int:
        return len(self.docs[0].chunks) if self.docs else 0


def _h(*parts) -> int:
    return int(hashlib.sha256(":".join(map(str, parts)).encode("utf-8")).hexdigest()[:16], 16)


@lru_cache(maxsize=8)
def _tokenized(tokenizer_path: str, tokenizer_hash: str, source: str, split: str) -> dict:
    """name -> token ids of every file of one source and split (cached per tokenizer content)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_path)
    files = build_corpus().select(source, split)
    encs = tok.encode_batch([d.text for d in files], add_special_tokens=False)
    return {d.name: tuple(e.ids) for d, e in zip(files, encs)}


def build_workload(cfg: WorkloadConfig, tokenizer_path) -> Workload:
    """Deterministic documents x turns for `cfg`, tokenized with `tokenizer_path`.

    `tokenizer_path` is a tokenizer.json or a checkpoint dir holding one.
    Raises a one-line AtlasError on a bad config or an impossible request.
    """
    validate_workload(cfg)
    tp = Path(tokenizer_path)
    if tp.is_dir():
        tp = tp / "tokenizer.json"
    if not tp.is_file():
        raise AtlasError(f"tokenizer {str(tp)!r} not found")
    tok_hash = file_sha256(tp)
    corpus = build_corpus()
    files = corpus.select(cfg.corpus, cfg.split)
    toks = _tokenized(str(tp), tok_hash, cfg.corpus, cfg.split)
    need = cfg.turns * cfg.chunk_tokens

    eligible = sorted((n for n, ids in toks.items() if len(ids) >= need), key=lambda n: (_h(cfg.seed, n), n))
    windows: list[tuple[str, int]] = []
    if not eligible:
        longest = max((len(v) for v in toks.values()), default=0)
        raise AtlasError(f"workload: no {cfg.split} file of corpus {cfg.corpus!r} has {need} tokens "
                         f"(turns {cfg.turns} x chunk_tokens {cfg.chunk_tokens}); the longest has {longest}")
    if len(eligible) >= cfg.n_docs:
        selection = "one window per file"
        for name in eligible[:cfg.n_docs]:
            slack = len(toks[name]) - need
            windows.append((name, _h(cfg.seed, name, "offset") % (slack + 1)))
    else:
        selection = (f"disjoint windows from the longest files: only {len(eligible)} file(s) have "
                     f"{need} tokens, {cfg.n_docs} documents asked for")
        by_len = sorted(eligible, key=lambda n: (-len(toks[n]), n))
        cap = {n: len(toks[n]) // need for n in by_len}
        if sum(cap.values()) < cfg.n_docs:
            raise AtlasError(f"workload: corpus {cfg.corpus!r} {cfg.split} split holds only "
                             f"{sum(cap.values())} disjoint windows of {need} tokens; n_docs={cfg.n_docs}")
        used = {n: 0 for n in by_len}
        while len(windows) < cfg.n_docs:         # round-robin over the longest files
            for n in by_len:
                if used[n] < cap[n] and len(windows) < cfg.n_docs:
                    windows.append((n, used[n] * need))
                    used[n] += 1

    docs = []
    sources = sorted({name for name, _ in windows})
    doc_cluster = [sources.index(name) for name, _ in windows]
    # the documents' hash: how the target decodes them (cfg.sampling) is recorded on its own
    h = hashlib.sha256(json.dumps({k: v for k, v in asdict(cfg).items() if k != "sampling"},
                                  sort_keys=True).encode("utf-8"))
    for i, (name, start) in enumerate(windows):
        ids = list(toks[name][start:start + need])
        chunks = [ids[t * cfg.chunk_tokens:(t + 1) * cfg.chunk_tokens] for t in range(cfg.turns)]
        docs.append(Document(doc_id=i, name=f"{name}@{start}", chunks=chunks))
        h.update(f"{i}:{name}@{start}".encode("utf-8"))
        h.update(np.asarray(ids, dtype="<i4").tobytes())

    info = {
        "corpus": cfg.corpus,
        "split": cfg.split,
        "python_version": corpus.info.python_version,
        "corpus_files": corpus.info.n_files,
        "corpus_hash": corpus.info.sha256,
        "split_rule": corpus.info.split_rule,
        "files_in_split": len(files),
        "files_long_enough": len(eligible),
        "selection": selection,
        # the unit outcomes cluster in: a document, unless several were cut from one file
        "cluster_unit": "document" if len(sources) == len(windows) else "source file",
        "n_clusters": len(sources),
        "doc_cluster": doc_cluster,
        "tokenizer_hash": tok_hash,
        "tokens_per_doc": need,
    }
    return Workload(docs=docs, gen_tokens=cfg.gen_tokens, hash="sha256:" + h.hexdigest(), info=info)

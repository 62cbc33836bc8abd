"""The offline corpus and the workload built from it: deterministic, split, hashed."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from atlas_ab import AtlasError
from atlas_ab.config.structured import WorkloadConfig
from atlas_ab.workload.corpus import _pydoc_docs, build_corpus, split_of
from atlas_ab.workload.documents import build_workload

TOKENIZER = Path(__file__).resolve().parents[2] / "atlas_ab" / "models" / "default" / "tokenizer.json"


@pytest.fixture(scope="module")
def corpus():
    return build_corpus()


def test_corpus_is_deterministic(corpus):
    build_corpus.cache_clear()
    again = build_corpus()
    assert again.info == corpus.info
    assert [d.name for d in again.docs] == [d.name for d in corpus.docs]
    assert corpus.info.sha256.startswith("sha256:") and len(corpus.info.sha256) == 7 + 64


def test_corpus_split_disjoint_and_fixed(corpus):
    train = {d.name for d in corpus.select(split="train")}
    held = {d.name for d in corpus.select(split="heldout")}
    assert train and held and not train & held
    assert len(train) + len(held) == corpus.info.n_files
    assert 0.02 < len(held) / corpus.info.n_files < 0.10
    assert all(d.split == split_of(d.name) for d in corpus.docs)
    # the split is a function of the name alone: golden values of the rule
    # (int(sha256(name)[:8], 16) % 1000: 15 and 43 are < 50, held out; 177 is not)
    assert split_of("stdlib/_pydecimal.py") == "heldout" and split_of("stdlib/_pyio.py") == "heldout"
    assert split_of("stdlib/json/decoder.py") == "train"


def test_corpus_has_no_tests_or_site_packages(corpus):
    bad = {"test", "tests", "idle_test", "site-packages", "__pycache__"}
    for d in corpus.select("stdlib"):
        parts = d.name.split("/")[1:-1]
        assert not bad & set(parts), d.name
        assert not d.name.split("/")[-1].startswith("_sysconfigdata")
    assert {d.source for d in corpus.docs} == {"stdlib", "pydoc"}
    assert len(_pydoc_docs()) == len(corpus.select("pydoc"))
    assert len(corpus.select("stdlib")) > 300


@pytest.fixture(scope="module")
def workload():
    return build_workload(WorkloadConfig(n_docs=6, turns=4, chunk_tokens=32, gen_tokens=16), TOKENIZER)


def test_workload_shapes(workload):
    assert len(workload.docs) == 6 and workload.gen_tokens == 16 and workload.turns == 4
    assert [d.doc_id for d in workload.docs] == list(range(6))
    for d in workload.docs:
        assert len(d.chunks) == 4 and all(len(c) == 32 for c in d.chunks)
        assert all(isinstance(t, int) and 0 <= t < 4096 for c in d.chunks for t in c)
        assert d.name.startswith("stdlib/")
    assert len({d.name.split("@")[0] for d in workload.docs}) == 6     # one window per file
    held = {d.name for d in build_corpus().select("stdlib", "heldout")}
    assert all(d.name.split("@")[0] in held for d in workload.docs)
    info = workload.info
    for key in ("python_version", "corpus_files", "corpus_hash", "split", "tokenizer_hash"):
        assert key in info
    assert info["split"] == "heldout"


def test_workload_is_deterministic_and_seeded(workload):
    cfg = WorkloadConfig(n_docs=6, turns=4, chunk_tokens=32, gen_tokens=16)
    again = build_workload(cfg, TOKENIZER.parent)        # a checkpoint dir works too
    assert again.hash == workload.hash
    assert [d.chunks for d in again.docs] == [d.chunks for d in workload.docs]
    other = build_workload(dataclasses.replace(cfg, seed=1), TOKENIZER)
    assert other.hash != workload.hash
    assert build_workload(dataclasses.replace(cfg, gen_tokens=8), TOKENIZER).hash != workload.hash


def test_workload_chunks_are_consecutive_text(workload):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(TOKENIZER))
    texts = {d.name: d.text for d in build_corpus().select("stdlib", "heldout")}
    d = workload.docs[0]
    flat = [t for c in d.chunks for t in c]
    assert tok.decode(flat) in texts[d.name.split("@")[0]]


def test_workload_window_fallback():
    w = build_workload(WorkloadConfig(corpus="pydoc", n_docs=4, turns=4, chunk_tokens=64), TOKENIZER)
    assert len(w.docs) == 4 and "disjoint windows" in w.info["selection"]
    spans = {}
    for d in w.docs:
        name, start = d.name.rsplit("@", 1)
        spans.setdefault(name, []).append(int(start))
    for starts in spans.values():       # windows of one file do not overlap
        starts.sort()
        assert all(b - a >= 4 * 64 for a, b in zip(starts, starts[1:]))


@pytest.mark.parametrize("kw, msg", [
    (dict(n_docs=0), "n_docs"),
    (dict(turns=0), "turns"),
    (dict(chunk_tokens=-1), "chunk_tokens"),
    (dict(gen_tokens=-1), "gen_tokens"),
    (dict(corpus="wiki"), "corpus"),
    (dict(split="dev"), "split"),
    (dict(turns=1000, chunk_tokens=1000), "no heldout file"),
    (dict(corpus="pydoc", n_docs=500, turns=2, chunk_tokens=64), "disjoint windows"),
])
def test_workload_errors(kw, msg):
    with pytest.raises(AtlasError, match=msg) as e:
        build_workload(WorkloadConfig(**kw), TOKENIZER)
    assert "\n" not in str(e.value)


def test_workload_missing_tokenizer(tmp_path):
    with pytest.raises(AtlasError, match="not found"):
        build_workload(WorkloadConfig(), tmp_path / "nope.json")

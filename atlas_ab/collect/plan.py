"""What the collector sends: our workload's documents (conf/workload/NAME.yaml, its chunks decoded
with the embedded tokenizer) or the user's prompts file, as conversations of turns.

A conversation is one document; turn t's request is the conversation so far (earlier chunks and
the server's own replies) plus chunk t. `prompts_hash` is what every arm must share.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from atlas_ab import AtlasError


@dataclass
class Conversation:
    doc_id: int
    turns: list[str]
    max_tokens: list[int]
    ids: list[list[int]] | None = None      # the turns' token ids (our workload), for --token-ids


@dataclass
class Plan:
    conversations: list[Conversation]
    source: dict                   # what the prompts are (workload config + hash, or the file + hash)
    workload_hash: str | None = None

    @property
    def n_requests(self) -> int:
        return sum(len(c.turns) for c in self.conversations)


def workload_plan(name: str, overrides: list[str]) -> Plan:
    """Our workload (conf/workload/NAME.yaml + KEY=VALUE overrides), its chunks decoded to text."""
    import dataclasses

    import yaml
    from tokenizers import Tokenizer

    from atlas_ab.config.paths import PACKAGE_DIR
    from atlas_ab.config.structured import SamplingConfig, WorkloadConfig
    from atlas_ab.workload.documents import build_workload

    path = PACKAGE_DIR / "conf" / "workload" / f"{name}.yaml"
    if not path.is_file():
        have = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise AtlasError(f"--workload {name!r}: no {path.name} (have: {', '.join(have)})")
    cfg = yaml.safe_load(path.read_text()) or {}
    names = {f.name: f.type for f in dataclasses.fields(WorkloadConfig)}
    for o in overrides:
        key, _, value = o.partition("=")
        if key not in names or not _:
            raise AtlasError(f"--set {o!r}: expected KEY=VALUE with KEY one of {', '.join(names)}")
        cfg[key] = int(value) if value.lstrip("-").isdigit() else value
    tok_path = PACKAGE_DIR / "models" / "default" / "tokenizer.json"
    cfg["sampling"] = SamplingConfig(**(cfg.get("sampling") or {}))
    wl = build_workload(WorkloadConfig(**cfg), tok_path)
    tok = Tokenizer.from_file(str(tok_path))
    convs = [Conversation(d.doc_id, [tok.decode(c, skip_special_tokens=False) for c in d.chunks],
                          [wl.gen_tokens] * len(d.chunks), [list(c) for c in d.chunks]) for d in wl.docs]
    # the sampling block as data, not its repr: the manifest's config rebuilds the workload
    record = {**cfg, "sampling": dataclasses.asdict(cfg["sampling"])}
    return Plan(convs, {"workload": name, "config": record, "hash": wl.hash, "tokenizer": str(tok_path)}, wl.hash)


def prompts_plan(path: Path, max_tokens: int) -> Plan:
    if not path.is_file():
        raise AtlasError(f"{path}: no such prompts file")
    convs, seen = [], set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError as e:
            raise AtlasError(f"{path}: line {n}: not JSON ({e.msg})") from None
        if not isinstance(d, dict) or ("turns" in d) == ("prompt" in d):
            raise AtlasError(f"{path}: line {n}: expected an object with either 'turns' (a list of strings) "
                             "or 'prompt' (a string)")
        turns = d["turns"] if "turns" in d else [d["prompt"]]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
            raise AtlasError(f"{path}: line {n}: field 'turns' must be a non-empty list of strings")
        doc = d.get("doc_id", len(convs))
        if not isinstance(doc, int) or doc < 0 or doc in seen:
            raise AtlasError(f"{path}: line {n}: field 'doc_id' must be a new integer >= 0, got {doc!r}")
        seen.add(doc)
        mt = d.get("max_tokens", max_tokens)
        if not isinstance(mt, int) or mt < 1:
            raise AtlasError(f"{path}: line {n}: field 'max_tokens' must be an integer >= 1")
        convs.append(Conversation(doc, turns, [mt] * len(turns)))
    if not convs:
        raise AtlasError(f"{path}: no prompts")
    h = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return Plan(convs, {"prompts": str(path), "hash": h}, h)


def prompts_hash(plan: Plan) -> str:
    """The prompts every arm must share: documents, turns' text, max_tokens."""
    h = hashlib.sha256()
    for c in plan.conversations:
        h.update(json.dumps([c.doc_id, c.turns, c.max_tokens]).encode())
    return "sha256:" + h.hexdigest()

"""Tiny random checkpoints and documents for runner tests (CPU, fp32)."""
from __future__ import annotations

import numpy as np
import torch

from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.model import MTPModule, Transformer, init_weights
from atlas_ab.workload.documents import Document


def tiny_args(vocab=48, hidden=32, layers=2, heads=4, kv_heads=2, mtp=1, **kw) -> ModelArgs:
    return ModelArgs(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden + 8,
                     num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                     head_dim=hidden // heads, num_nextn_predict_layers=mtp, **kw)


def tiny_models(seed=0, std=0.3, noise=0.05, **kw):
    """A one-layer trunk + an MTP module built to be a decent drafter.

    Embedding rows are scaled to RMS 1, so enorm(embed(t)) == embed(t); eh_proj
    passes the embedding through and ignores the hidden; the MTP block is a copy
    of the trunk's layer (plus `noise`), its head the trunk's. So draft 1 is the
    trunk's own next-token function of the last token, up to attention context
    and noise: every accept length occurs, which the row-space and lever tests
    need, while the hidden handoff still matters."""
    torch.manual_seed(seed)
    args = tiny_args(layers=1, **kw)
    trunk = Transformer(args)
    init_weights(trunk, std=std)
    with torch.no_grad():
        e = trunk.model.embed_tokens.weight
        e /= e.pow(2).mean(-1, keepdim=True).sqrt()
    mtp = MTPModule(args)
    init_weights(mtp, std=std)
    H = args.hidden_size
    with torch.no_grad():
        mtp.load_state_dict({**mtp.state_dict(), **trunk.model.layers[0].state_dict()})
        for p in mtp.parameters():
            p.add_(noise * torch.randn_like(p) * p.std())
        mtp.eh_proj.weight.zero_()
        mtp.eh_proj.weight[:, :H] = torch.eye(H)
        mtp.eh_proj.weight[:, H:] = noise * torch.randn(H, H)
        mtp.enorm.weight.fill_(1.0)
        mtp.shared_head.norm.weight.copy_(trunk.model.norm.weight)
    return trunk.eval(), mtp.eval().attach(trunk)


def tiny_draft(trunk, noise=0.3, seed=1):
    """A draft LM: the target's weights plus noise (a drafter that is right often, not always)."""
    torch.manual_seed(seed)
    m = Transformer(trunk.args)
    with torch.no_grad():
        m.load_state_dict(trunk.state_dict())
        for p in m.parameters():
            p.add_(noise * torch.randn_like(p) * p.std())
    return m.eval()


def tiny_docs(n=4, turns=3, chunk=12, vocab=48, seed=0):
    rng = np.random.default_rng(seed)
    return [Document(doc_id=i, name=f"tiny{i}",
                     chunks=[rng.integers(0, vocab, chunk + (i % 3)).tolist() for _ in range(turns)])
            for i in range(n)]


def tiny_eagle3(seed=0, layers=(1, 2, 3), steps=80, **kw):
    """A three-layer tiny trunk and an EAGLE-3 head on its features at `layers`, trained a few
    steps (train/eagle3.train: the training-time test) on the trunk's own greedy text, so its drafts
    are right often, not always."""
    from atlas_ab.runtime.eagle3 import Eagle3Head
    from atlas_ab.train.eagle3 import head_args, train
    torch.manual_seed(seed)
    args = tiny_args(layers=3, mtp=0, **kw)
    trunk = Transformer(args)
    init_weights(trunk, std=0.3)
    with torch.no_grad():
        e = trunk.model.embed_tokens.weight
        e /= e.pow(2).mean(-1, keepdim=True).sqrt()
        seq = torch.as_tensor(np.random.default_rng(seed).integers(0, args.vocab_size, (8, 4)))
        for _ in range(60):       # greedy continuations of random starts: text the target would write
            nxt = trunk.logits(trunk.forward_train(seq)[:, -1:])[:, 0].argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], 1)
    head = Eagle3Head(head_args(args), layers, args.hidden_size)
    init_weights(head, std=0.1)
    train(trunk, head, seq.flatten().numpy(), steps=steps, batch=4, seq_len=24, warmup=5, lr=1e-2, ttt=3, seed=seed)
    return trunk.eval(), head.eval()

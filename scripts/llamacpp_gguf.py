"""Write a shipped checkpoint (atlas_ab/models/*) as a GGUF file for llama.cpp's server.

    PYTHONPATH=<llama.cpp>/gguf-py python scripts/llamacpp_gguf.py {llama,mimo2} MODEL_DIR OUT.gguf

Weights are written as float32 (our bf16 values, exactly), so llama.cpp's CPU path computes in
fp32 from the same numbers as our CPU runner. The tokenizer is written as what it is: GPT-2
byte-level BPE ("gpt2" model, "gpt-2" pre-tokenizer: ByteLevel with the GPT-2 regex), with
<|endoftext|> as BOS/EOS and no BOS added (our runner adds none; a prompt of token ids gets
none from llama.cpp either).

  llama  the Llama trunk alone (an MTP layer is left out): the target of `--spec-type
         draft-simple`, or the draft model. Q and K rows are permuted as llama.cpp's own
         converter does (conversion/llama.py `LlamaModel.permute`): LLM_ARCH_LLAMA rotates
         adjacent pairs (RoPE "norm") where HF rotates halves.
  mimo2  the trunk + its DeepSeek-V3 MTP layer as LLM_ARCH_MIMO2 (src/models/mimo2.cpp), the
         one MTP architecture llama.cpp has whose graph is this checkpoint's: pre-norm Llama
         blocks with RoPE on halves (NEOX), the hidden handed to the MTP layer taken BEFORE the
         final norm, x = eh_proj(cat[enorm(embed(tok)), hnorm(h)]), one dense decoder block,
         its pre-norm output recycled into the next draft, shared_head.norm + the trunk's
         lm_head. A sliding window is declared (mimo2 needs one) that is never shorter than
         the context, so every layer attends to every earlier position.
         What llama.cpp feeds that layer is its policy, not the checkpoint: docs/ingest.md.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

PROG = "llamacpp_gguf.py"


def fail(msg: str) -> None:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(2)


def load(model_dir: Path) -> tuple[dict, dict[str, np.ndarray], dict]:
    from safetensors.torch import load_file
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (model_dir / f).is_file():
            fail(f"{model_dir}: no {f}")
    cfg = json.loads((model_dir / "config.json").read_text())
    if cfg.get("model_type") != "llama":
        fail(f"{model_dir}: model_type {cfg.get('model_type')!r}, only 'llama' trunks are written")
    if cfg.get("tie_word_embeddings"):
        fail(f"{model_dir}: tied embeddings are not written (none of the shipped checkpoints has them)")
    sd = {k: v.float().numpy() for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    return cfg, sd, tok


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF's halves -> llama.cpp's adjacent pairs, per head (conversion/llama.py `LlamaModel.permute`)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def add_tokenizer(w, tok: dict, vocab_size: int) -> None:
    import gguf
    model = tok["model"]
    if model.get("type") != "BPE" or (tok.get("pre_tokenizer") or {}).get("type") != "ByteLevel":
        fail("tokenizer.json: only byte-level BPE is written")
    by_id = {i: s for s, i in model["vocab"].items()}
    special = {a["id"]: a["content"] for a in tok.get("added_tokens", []) if a.get("special")}
    by_id.update(special)
    if sorted(by_id) != list(range(vocab_size)):
        fail(f"tokenizer.json: ids are not exactly 0..{vocab_size - 1}")
    eos = [i for i, s in special.items() if s == "<|endoftext|>"]
    if not eos:
        fail("tokenizer.json: no <|endoftext|> special token")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list([by_id[i] for i in range(vocab_size)])
    w.add_token_types([gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
                       for i in range(vocab_size)])
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in model["merges"]])
    w.add_bos_token_id(eos[0])
    w.add_eos_token_id(eos[0])
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)


def trunk_params(w, cfg: dict, n_blocks: int) -> None:
    import gguf
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(n_blocks)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)


def block(sd: dict, src: int, dst: int, cfg: dict, pairs: bool, fused_qkv: bool) -> dict[str, np.ndarray]:
    p = f"model.layers.{src}."
    q, k, v = (sd[p + f"self_attn.{n}_proj.weight"] for n in "qkv")
    if pairs:
        q, k = permute(q, cfg["num_attention_heads"]), permute(k, cfg["num_key_value_heads"])
    b = f"blk.{dst}."
    out = {b + "attn_norm.weight": sd[p + "input_layernorm.weight"],
           b + "attn_output.weight": sd[p + "self_attn.o_proj.weight"],
           b + "ffn_norm.weight": sd[p + "post_attention_layernorm.weight"],
           b + "ffn_gate.weight": sd[p + "mlp.gate_proj.weight"],
           b + "ffn_up.weight": sd[p + "mlp.up_proj.weight"],
           b + "ffn_down.weight": sd[p + "mlp.down_proj.weight"]}
    if fused_qkv:      # rows [Q | K | V], the order mimo2.cpp's views read
        out[b + "attn_qkv.weight"] = np.concatenate([q, k, v], axis=0)
    else:
        out.update({b + "attn_q.weight": q, b + "attn_k.weight": k, b + "attn_v.weight": v})
    return out


def write(path: Path, arch: str, cfg: dict, tok: dict, tensors: dict[str, np.ndarray], extra) -> None:
    import gguf
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), arch)
    w.add_name(path.stem)
    extra(w)
    add_tokenizer(w, tok, cfg["vocab_size"])
    for name, t in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)          # a torn write never looks like a model


def convert(kind: str, model_dir: Path, out: Path) -> dict[str, np.ndarray]:
    cfg, sd, tok = load(model_dir)
    n = cfg["num_hidden_layers"]
    head = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"],
            "output.weight": sd["lm_head.weight"]}
    if kind == "llama":
        tensors = dict(head)
        for i in range(n):
            tensors.update(block(sd, i, i, cfg, pairs=True, fused_qkv=False))
        write(out, "llama", cfg, tok, tensors, lambda w: trunk_params(w, cfg, n))
        return tensors
    layout = (cfg.get("atlas_mtp") or {})
    if cfg.get("num_nextn_predict_layers") != 1 or layout.get("layout") != "deepseek_v3":
        fail(f"{model_dir}: mimo2 needs one DeepSeek-V3-layout MTP layer (config: num_nextn_predict_layers="
             f"{cfg.get('num_nextn_predict_layers')}, atlas_mtp.layout={layout.get('layout')!r})")
    if layout.get("handoff_norm") != "pre" or layout.get("recycle_norm") != "pre" or layout.get("zero_first_embed"):
        fail(f"{model_dir}: mimo2's MTP graph hands over and recycles the pre-norm hidden and never zeroes an "
             f"embedding; this checkpoint declares {layout}")
    m = f"model.layers.{n}."
    if m + "shared_head.head.weight" in sd:
        fail(f"{model_dir}: an MTP layer with its own head is not written (mimo2 would use it, ours too; untested)")
    tensors = dict(head)
    for i in range(n + 1):
        tensors.update(block(sd, i, i, cfg, pairs=False, fused_qkv=True))
    tensors.update({f"blk.{n}.nextn.eh_proj.weight": sd[m + "eh_proj.weight"],
                    f"blk.{n}.nextn.enorm.weight": sd[m + "enorm.weight"],
                    f"blk.{n}.nextn.hnorm.weight": sd[m + "hnorm.weight"],
                    f"blk.{n}.nextn.shared_head_norm.weight": sd[m + "shared_head.norm.weight"]})

    def params(w):
        trunk_params(w, cfg, n + 1)
        w.add_nextn_predict_layers(1)
        w.add_expert_feed_forward_length(0)
        # mimo2's KV cache needs a sliding-window layer (llama-model.cpp asserts is_swa_any): every
        # layer is one, with a window as long as the positions, so no position is ever masked
        w.add_sliding_window(cfg["max_position_embeddings"])
        w.add_sliding_window_pattern([True] * (n + 1))
        w.add_rope_freq_base_swa(float(cfg["rope_theta"]))
    write(out, "mimo2", cfg, tok, tensors, params)
    return tensors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=("llama", "mimo2"))
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    a = ap.parse_args(argv)
    try:
        import gguf  # noqa: F401
    except ImportError:
        fail("the gguf package is not importable: put llama.cpp's gguf-py on PYTHONPATH")
    convert(a.kind, a.model_dir, a.out)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

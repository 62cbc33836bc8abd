"""Serve the default model (as a plain Llama: vLLM's LlamaForCausalLM has the EAGLE-3 aux-hidden-state
hooks; its MiMo export does not) with our EAGLE-3 head through vLLM's eagle3 method, on this CPU."""
import json
import sys
from pathlib import Path

import torch

from atlas_ab.engines.vllm import server
from atlas_ab.runtime import checkpoint

out = Path("/tmp/e3vllm/target")
if not (out / "config.json").exists():
    ck = checkpoint.load("atlas_ab/models/default", "cpu", torch.bfloat16)
    checkpoint.save(out, ck.args, ck.trunk, None, tokenizer_json=Path("atlas_ab/models/default/tokenizer.json"))
spec = server.ServerSpec(str(out), served_name="default", port=8047,
                         speculative={"method": "eagle3", "model": str(Path("atlas_ab/models/eagle3").resolve()),
                                      "num_speculative_tokens": int(sys.argv[1])})
print(json.dumps(server.serve(spec), indent=1))

import json

import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.eagle3 import EAGLE3Proposer
from atlas_ab.runtime import checkpoint, eagle3_checkpoint
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.workload.documents import Document

torch.set_num_threads(1)
res = json.load(open("/tmp/e3vllm/responses.json"))
ck = checkpoint.load("atlas_ab/models/default", "cpu", torch.float32)
head = eagle3_checkpoint.load("atlas_ab/models/eagle3")[0]
prompts = [r["choices"][0]["prompt_token_ids"] for r in res]
for arm in [ArmConfig(name="fed", proposer="eagle3", num_drafts=3, catchup=True, refeed=True, drafter_prefill=True),
            ArmConfig(name="unfed", proposer="eagle3", num_drafts=3)]:
    docs = [Document(doc_id=i, name=f"p{i}", chunks=[p]) for i, p in enumerate(prompts)]
    prop = EAGLE3Proposer(ck.trunk, head, arm.row_space, arm.refeed)
    tr = Wave(LiveTarget(ck.trunk, features=prop.feature_layers), prop, arm, docs, 40).run()
    st = tr.steps.table().to_pandas()
    for i, r in enumerate(res):
        v = r["metrics"]["speculative_decoding"]
        ours = st[st.doc_id == i].accept_len.tolist()
        print(arm.name, i, "tokens equal:", tr.generated[i][0] == r["choices"][0]["token_ids"],
              "ours accepted", sum(ours), "of", 3 * len(ours),
              "vllm", v["num_accepted_draft_tokens"], "of", v["num_draft_tokens"])
        print("   ours ", ours)
        print("   vllm ", v["per_step_accepted"])

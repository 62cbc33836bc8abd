import json
import urllib.request

from tokenizers import Tokenizer

from atlas_ab.workload.corpus import build_corpus

tok = Tokenizer.from_file("atlas_ab/models/default/tokenizer.json")
held = [d for d in build_corpus().select("stdlib", "heldout") if len(d.text) > 4000]
ids = tok.encode(held[0].text, add_special_tokens=False).ids
prompts = [ids[:48], ids[300:331], ids[900:960]]
res = []
for p in prompts:
    body = {"model": "default", "prompt": p, "max_tokens": 40, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    req = urllib.request.Request("http://127.0.0.1:8047/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    r = urllib.request.urlopen(req, timeout=300)
    out = json.loads(r.read())
    res.append(out)
json.dump(res, open("/tmp/e3vllm/responses.json", "w"))
c = res[0]["choices"][0]
print(sorted(c.keys()), sorted(res[0].keys()))
for o in res:
    c = o["choices"][0]
    skip = ("choices", "id", "object", "created", "model", "usage")
    print(c.get("token_ids", [])[:10], {k: v for k, v in o.items() if k not in skip},
          json.dumps(o.get("usage"))[:300])

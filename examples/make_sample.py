#!/usr/bin/python3
"""Write the recorded sample that examples/translate.c runs on, from a golden e2e vector.

    examples/make_sample.py [SCENARIO]      (default text_basic; run from anywhere)

Reads $COAI_VECTORS/e2e/scenario_<SCENARIO>.json (default ../shared/spec/vectors relative to
the repo root) and writes, next to this script:
  <SCENARIO>.request.json   the OpenAI request body the original client sent. Its model is
                            the id the original resolved through GetUsableModels, since the
                            example has no model list (a server calls coai_models_resolve()).
  <SCENARIO>.upstream       the server's frames as they came over the wire (5-byte envelopes)
  <SCENARIO>.expected       what translate must print: every BidiAppend body the original
                            POSTed ("BidiAppend <seqno>: <hex>") and the assistant text
                            ("content: <JSON string>")
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "text_basic"
    vec = os.environ.get("COAI_VECTORS", os.path.join(ROOT, "..", "shared", "spec", "vectors"))
    if not os.path.isabs(vec):
        vec = os.path.join(ROOT, vec)
    with open(os.path.join(vec, "e2e", "scenario_%s.json" % name), encoding="utf-8") as f:
        sc = json.load(f)

    appends = [u for u in sc["upstream_requests"] if u["url"].endswith("/BidiAppend")]
    run = appends[0]["decoded"]["AgentClientMessage"]["runRequest"]
    body = dict(sc["openai_request"]["body"])
    body["model"] = run["modelDetails"]["modelId"]

    # The assistant text a client sees: the content deltas of the original's SSE body.
    content = ""
    for block in sc["openai_response"]["body"].split("\n\n"):
        if block.startswith("data: {"):
            for ch in json.loads(block[6:]).get("choices", []):
                content += ch.get("delta", {}).get("content") or ""

    out = os.path.join(HERE, name)
    with open(out + ".request.json", "w", encoding="utf-8") as f:
        json.dump(body, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(out + ".upstream", "wb") as f:
        for fr in sc["server_frames_sent_in_order"]:
            f.write(bytes.fromhex(fr["frame_hex"]))
    with open(out + ".expected", "w", encoding="utf-8") as f:
        for u in appends:
            seq = u["decoded"]["BidiAppendRequest"]["append_seqno"]
            f.write("BidiAppend %s: %s\n" % (seq, u["body_hex"]))
        f.write("content: %s\n" % json.dumps(content, ensure_ascii=False))
    print("wrote %s.{request.json,upstream,expected}" % os.path.relpath(out))


if __name__ == "__main__":
    main()

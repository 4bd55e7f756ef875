// The official `openai` npm SDK (v7, Node 24, from build/clients) against cursor-oai's
// POST /v1/responses. One mode per run; prints one JSON line with what it saw.
//   node sdk_responses.mjs MODE BASE_URL '{"model": ...}'
// Modes: version, nonstream, stream, tools (function tool round trip), previous
// (store + previous_response_id + GET /v1/responses/{id}), error.
import OpenAI from "openai";
import { readFileSync } from "node:fs";

const [mode, baseURL, paramsJson] = process.argv.slice(2);
const p = JSON.parse(paramsJson || "{}");
const client = new OpenAI({ baseURL, apiKey: "sk-test", maxRetries: p.maxRetries ?? 0,
                            timeout: 60000 });

function out(o) { process.stdout.write(JSON.stringify(o) + "\n"); }

async function main() {
  if (mode === "version") {
    // the script runs from build/clients (see clients.run_node)
    const pkg = JSON.parse(readFileSync(new URL("./node_modules/openai/package.json",
                                                import.meta.url), "utf8"));
    return out({ version: pkg.version, node: process.version });
  }
  if (mode === "nonstream") {
    const r = await client.responses.create({ model: p.model, input: p.input ?? "Say hello.",
                                              instructions: p.instructions });
    return out({ id: r.id, status: r.status, output_text: r.output_text,
                 types: r.output.map((i) => i.type), usage: r.usage });
  }
  if (mode === "stream") {
    const stream = await client.responses.create({ model: p.model, input: p.input ?? "Hi",
                                                   stream: true });
    const types = [], seqs = [];
    let text = "", reasoning = "", final = null;
    for await (const ev of stream) {
      types.push(ev.type);
      seqs.push(ev.sequence_number);
      if (ev.type === "response.output_text.delta") text += ev.delta;
      if (ev.type === "response.reasoning_summary_text.delta") reasoning += ev.delta;
      if (ev.type === "response.completed") final = ev.response;
    }
    return out({ types, seqs, text, reasoning, status: final && final.status,
                 usage: final && final.usage });
  }
  if (mode === "tools") {
    const tools = [{ type: "function", name: "read_file", description: "Read a file",
                     parameters: { type: "object", properties: { path: { type: "string" } },
                                   required: ["path"] } }];
    const input = [{ role: "user", content: p.prompt }];
    const r1 = await client.responses.create({ model: p.model, input, tools });
    const call = r1.output.find((i) => i.type === "function_call");
    if (!call) return out({ fatal: "no function_call", output: r1.output });
    const args = JSON.parse(call.arguments);
    const fs = await import("node:fs");
    const content = fs.readFileSync(args.path, "utf8");
    const r2 = await client.responses.create({
      model: p.model, tools,
      input: [...input, ...r1.output,
              { type: "function_call_output", call_id: call.call_id, output: content }] });
    return out({ call: { name: call.name, call_id: call.call_id, args }, first_status: r1.status,
                 final_text: r2.output_text });
  }
  if (mode === "previous") {
    const r1 = await client.responses.create({ model: p.model, input: p.first, store: true });
    const r2 = await client.responses.create({ model: p.model, input: p.second,
                                               previous_response_id: r1.id });
    const got = await client.responses.retrieve(r1.id);
    let missing = null;
    try {
      await client.responses.create({ model: p.model, input: "x",
                                      previous_response_id: "resp_doesnotexist" });
    } catch (e) { missing = { status: e.status, code: e.code, message: e.message }; }
    return out({ first: r1.output_text, second: r2.output_text, retrieved: got.id === r1.id,
                 retrieved_text: got.output_text, missing });
  }
  if (mode === "error") {
    try {
      const r = await client.responses.create({ model: p.model, input: "x", stream: !!p.stream });
      if (p.stream) {
        const types = [];
        let failed = null;
        for await (const ev of r) {
          types.push(ev.type);
          if (ev.type === "response.failed") failed = ev.response.error;
        }
        return out({ types, failed });
      }
      return out({ fatal: "no error", r });
    } catch (e) {
      return out({ status: e.status, code: e.code, type: e.type, message: e.message,
                   name: e.constructor.name });
    }
  }
  out({ fatal: "unknown mode " + mode });
}

main().catch((e) => out({ fatal: String(e && e.stack || e) }));

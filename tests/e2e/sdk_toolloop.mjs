// A multi-step tool loop with the official `openai` npm package (held runs, issue 11):
// every response with tool calls is answered by running the `read` tool here and sending
// the results back, until the model answers. Prints one JSON object on stdout.
// usage: node sdk_toolloop.mjs <baseURL> <model>
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ apiKey: 'sk-local-test', baseURL, timeout: 60000, maxRetries: 0 });
const tools = [{ type: 'function', function: {
  name: 'read', description: 'Read a file',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } }];
const messages = [{ role: 'user', content: 'Read the files you need, then answer.' }];
const out = { steps: 0, final: null };
try {
  for (let i = 0; i < 6; i++) {
    const stream = await client.chat.completions.create({ model, messages, tools, stream: true });
    let content = '';
    const calls = [];
    for await (const chunk of stream) {
      for (const ch of chunk.choices ?? []) {
        const d = ch.delta ?? {};
        if (d.content) content += d.content;
        for (const tc of d.tool_calls ?? []) {
          const k = tc.index ?? 0;
          while (calls.length <= k) calls.push({ id: '', name: '', arguments: '' });
          if (tc.id) calls[k].id += tc.id;
          if (tc.function?.name) calls[k].name += tc.function.name;
          if (tc.function?.arguments) calls[k].arguments += tc.function.arguments;
        }
      }
    }
    if (!calls.length) { out.final = content; break; }
    out.steps++;
    messages.push({ role: 'assistant', content: content || null, tool_calls: calls.map((c) => (
      { id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })) });
    for (const c of calls) {
      let result;
      try { result = readFileSync(JSON.parse(c.arguments).path, 'utf8'); } catch (e) { result = 'Error: ' + e; }
      messages.push({ role: 'tool', tool_call_id: c.id, content: result });
    }
  }
} catch (e) {
  out.fatal = String(e?.message ?? e);
}
process.stdout.write(JSON.stringify(out) + '\n');

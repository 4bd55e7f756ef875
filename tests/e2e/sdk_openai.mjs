// Drives the proxy with the official `openai` npm package. Prints one JSON object on stdout.
// usage: node sdk_openai.mjs <baseURL> <mode> [jsonParams]
//   jsonParams: {model, messages | prompt, maxRetries, extra: {more request fields}}
//   modes: version | stream | nonstream | tools | custom | error | error_stream
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';
import { VERSION } from 'openai/version';

const [baseURL, mode, paramsJson] = process.argv.slice(2);
const P = paramsJson ? JSON.parse(paramsJson) : {};
const out = { mode };

function done(o) {
  process.stdout.write(JSON.stringify(o) + '\n');
  process.exit(0);
}

if (mode === 'version') {
  out.version = VERSION;
  done(out);
}

const client = new OpenAI({ apiKey: 'sk-local-test', baseURL, timeout: 30000,
                            maxRetries: P.maxRetries ?? 2 });
const model = P.model ?? 'scenario:text_basic';
const messages = P.messages ?? [{ role: 'user', content: P.prompt ?? 'Say hello' }];

async function collect(stream) {
  const r = { content: '', reasoning: '', finish: [], chunks: 0, toolCalls: [], models: [] };
  for await (const chunk of stream) {
    r.chunks++;
    if (chunk.model) r.models.push(chunk.model);
    for (const ch of chunk.choices ?? []) {
      const d = ch.delta ?? {};
      if (d.content) r.content += d.content;
      if (d.reasoning_content) r.reasoning += d.reasoning_content;
      for (const tc of d.tool_calls ?? []) {
        const i = tc.index ?? 0;
        while (r.toolCalls.length <= i) r.toolCalls.push({ id: '', name: '', arguments: '' });
        if (tc.id) r.toolCalls[i].id += tc.id;
        if (tc.function?.name) r.toolCalls[i].name += tc.function.name;
        if (tc.function?.arguments) r.toolCalls[i].arguments += tc.function.arguments;
      }
      if (ch.finish_reason) r.finish.push(ch.finish_reason);
    }
  }
  r.models = [...new Set(r.models)];
  return r;
}

function errInfo(e) {
  return { name: e?.constructor?.name, status: e?.status ?? null, message: String(e?.message),
           type: e?.type ?? e?.error?.type ?? null, code: e?.code ?? e?.error?.code ?? null,
           shouldRetry: e?.headers?.get?.('x-should-retry') ?? null };
}

try {
  if (mode === 'stream') {
    Object.assign(out, await collect(await client.chat.completions.create(
      { model, messages, stream: true, ...(P.extra ?? {}) })));
  } else if (mode === 'nonstream') {
    const r = await client.chat.completions.create({ model, messages, ...(P.extra ?? {}) });
    out.model = r.model;
    out.content = r.choices[0].message.content;
    out.reasoning = r.choices[0].message.reasoning_content ?? '';
    out.finish = [r.choices[0].finish_reason];
    out.object = r.object;
    out.usage = r.usage ?? null;
    out.toolCalls = (r.choices[0].message.tool_calls ?? []).map(
      (t) => ({ id: t.id, name: t.function.name, arguments: t.function.arguments }));
  } else if (mode === 'tools') {
    // Full round trip: tool call -> run the tool here -> follow-up with the result -> final text.
    const tools = [{ type: 'function', function: {
      name: 'read', description: 'Read a file',
      parameters: { type: 'object', properties: { filePath: { type: 'string' } },
                    required: ['filePath'] } } }];
    const first = await collect(await client.chat.completions.create(
      { model, messages, tools, stream: true }));
    out.first = first;
    if (first.toolCalls.length !== 1) done(out);
    const call = first.toolCalls[0];
    const args = JSON.parse(call.arguments);
    let result;
    try { result = readFileSync(args.filePath, 'utf8'); } catch (e) { result = 'Error: ' + e; }
    out.toolResult = result;
    const follow = [...messages,
      { role: 'assistant', content: first.content || null, tool_calls: [
        { id: call.id, type: 'function', function: { name: call.name,
                                                     arguments: call.arguments } }] },
      { role: 'tool', tool_call_id: call.id, content: result }];
    out.second = await collect(await client.chat.completions.create(
      { model, messages: follow, tools, stream: true }));
  } else if (mode === 'custom') {
    // A custom (freeform) tool: the call comes back as {type: 'custom', custom: {name, input}};
    // the assistant message is sent back as the SDK returned it, with the tool's result.
    const tools = [{ type: 'custom', custom: { name: 'apply_patch',
                                               description: 'Apply a patch to files',
                                               format: { type: 'text' } } }];
    const r = await client.chat.completions.create({ model, messages, tools });
    const msg = r.choices[0].message;
    out.first = { finish: r.choices[0].finish_reason, toolCalls: msg.tool_calls ?? [] };
    if ((msg.tool_calls ?? []).length !== 1) done(out);
    const follow = [...messages, msg,
      { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: P.result ?? 'Done!' }];
    const r2 = await client.chat.completions.create({ model, messages: follow, tools });
    out.second = { content: r2.choices[0].message.content, finish: r2.choices[0].finish_reason };
  } else if (mode === 'error' || mode === 'error_stream') {
    try {
      if (mode === 'error') {
        await client.chat.completions.create({ model, messages });
      } else {
        Object.assign(out, await collect(await client.chat.completions.create(
          { model, messages, stream: true })));
      }
      out.threw = false;
    } catch (e) {
      out.threw = true;
      out.error = errInfo(e);
    }
  } else {
    out.fatal = 'unknown mode ' + mode;
  }
} catch (e) {
  out.fatal = errInfo(e);
}
done(out);

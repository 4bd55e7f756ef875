// Drives the proxy with the official `@anthropic-ai/sdk` npm package. Prints one JSON object
// on stdout (the last line).
// usage: node sdk_anthropic.mjs <baseURL> <apiKey> <mode> [jsonParams]
//   modes: version | nonstream | stream | tools | count | error | error_stream
import Anthropic from '@anthropic-ai/sdk';
import { VERSION } from '@anthropic-ai/sdk/version';

const [baseURL, apiKey, mode, paramsJson] = process.argv.slice(2);
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

const client = new Anthropic({ apiKey, baseURL, timeout: 30000, maxRetries: P.maxRetries ?? 2 });
const model = P.model ?? 'claude-sonnet-4-5-20250929';
const messages = P.messages ?? [{ role: 'user', content: P.prompt ?? 'Say hello' }];

function errInfo(e) {
  return { name: e?.constructor?.name, status: e?.status ?? null, message: String(e?.message),
           type: e?.error?.error?.type ?? e?.type ?? null,
           shouldRetry: e?.headers?.get?.('x-should-retry') ?? null };
}

function blocks(msg) {
  return msg.content.map((b) => ({ type: b.type, text: b.text, thinking: b.thinking,
                                   signature: b.signature, id: b.id, name: b.name,
                                   input: b.input }));
}

try {
  if (mode === 'nonstream') {
    const m = await client.messages.create({ model, max_tokens: 1024, messages,
                                             thinking: P.thinking });
    Object.assign(out, { id: m.id, model: m.model, stop_reason: m.stop_reason,
                         usage: m.usage, content: blocks(m) });
  } else if (mode === 'stream') {
    const s = client.messages.stream({ model, max_tokens: 1024, messages, thinking: P.thinking });
    let text = '', thinking = '', events = [];
    s.on('text', (t) => { text += t; });
    s.on('thinking', (t) => { thinking += t; });
    s.on('streamEvent', (e) => { events.push(e.type); });
    const m = await s.finalMessage();
    Object.assign(out, { text, thinking, events, stop_reason: m.stop_reason, usage: m.usage,
                         content: blocks(m) });
  } else if (mode === 'tools') {
    // A tool round trip the way an agent does it: the model asks for Read, we "run" it and
    // send the result back with the assistant turn, the model answers.
    const tools = [{ name: 'Read', description: 'Read a file',
                     input_schema: { type: 'object', additionalProperties: false,
                                     properties: { file_path: { type: 'string' } },
                                     required: ['file_path'] } }];
    const m1 = P.stream
      ? await client.messages.stream({ model, max_tokens: 1024, messages, tools }).finalMessage()
      : await client.messages.create({ model, max_tokens: 1024, messages, tools });
    const use = m1.content.find((b) => b.type === 'tool_use');
    out.first = { stop_reason: m1.stop_reason, content: blocks(m1) };
    if (use) {
      const second = await client.messages.create({
        model, max_tokens: 1024, tools,
        messages: [...messages, { role: 'assistant', content: m1.content },
                   { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id,
                                               content: P.result ?? 'file contents' }] }] });
      out.second = { stop_reason: second.stop_reason, content: blocks(second) };
    }
  } else if (mode === 'count') {
    const r = await client.messages.countTokens({ model, messages });
    out.input_tokens = r.input_tokens;
    const m = await client.messages.create({ model, max_tokens: 16, messages });
    out.usage = m.usage;
  } else if (mode === 'error' || mode === 'error_stream') {
    try {
      if (mode === 'error') {
        await client.messages.create({ model, max_tokens: 16, messages });
      } else {
        const s = client.messages.stream({ model, max_tokens: 16, messages });
        s.on('text', (t) => { out.text = (out.text ?? '') + t; });
        await s.finalMessage();
      }
      out.error = null;
    } catch (e) {
      out.error = errInfo(e);
    }
  } else {
    out.fatal = 'unknown mode ' + mode;
  }
} catch (e) {
  out.fatal = errInfo(e);
}
done(out);

// openai_client.mjs - the official openai npm client against `tierllm serve`
// (tests/serve_openai.sh starts the server and passes what to expect):
//   TL_BASE_URL  http://127.0.0.1:PORT/v1      TL_API_KEY  the server's --api-key
//   TL_PROMPT    a completion prompt            TL_EXPECT   its greedy text (tierllm run)
//   TL_N         max_tokens for it
// Completions plain and streamed must give TL_EXPECT; chat plain and streamed must give
// a string with usage; the model list must name the served model; a wrong key must be
// refused with 401 as an APIError. Exits 1 on the first failure, printing it.
import OpenAI from 'openai';

const env = (k) => {
    if (process.env[k] === undefined) throw new Error(`${k} is not set`);
    return process.env[k];
};
const fail = (what, got, want) => {
    console.error(`FAIL: ${what}: got ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
    process.exit(1);
};
const client = new OpenAI({ baseURL: env('TL_BASE_URL'), apiKey: env('TL_API_KEY'), maxRetries: 0 });
const prompt = env('TL_PROMPT'), expect = env('TL_EXPECT'), n = Number(env('TL_N'));

const models = await client.models.list();
const ids = models.data.map((m) => m.id);
if (ids.length < 1) fail('models.list', ids, 'one model');
const model = ids[0];

const c = await client.completions.create({ model, prompt, max_tokens: n, temperature: 0 });
if (c.choices[0].text !== expect) fail('completion text', c.choices[0].text, expect);
if (!c.usage || c.usage.completion_tokens < 1 || c.usage.prompt_tokens < 1 ||
    c.usage.total_tokens !== c.usage.prompt_tokens + c.usage.completion_tokens)
    fail('completion usage', c.usage, 'prompt + completion = total');

let streamed = '', chunks = 0, usage = null;
const s = await client.completions.create({ model, prompt, max_tokens: n, temperature: 0, stream: true });
for await (const chunk of s) {
    chunks++;
    streamed += chunk.choices?.[0]?.text ?? '';
    if (chunk.usage) usage = chunk.usage;
}
if (streamed !== expect) fail('streamed completion text', streamed, expect);
if (chunks < 2) fail('streamed completion chunks', chunks, '>= 2');
if (!usage || usage.completion_tokens !== c.usage.completion_tokens)
    fail('streamed completion usage', usage, c.usage);

const messages = [{ role: 'system', content: 'You tell short stories.' },
                  { role: 'user', content: 'Tell me about a cat.' }];
const ch = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
const content = ch.choices[0].message.content;
if (typeof content !== 'string' || ch.choices[0].message.role !== 'assistant')
    fail('chat message', ch.choices[0].message, 'an assistant string');
if (!ch.usage || ch.usage.completion_tokens < 1) fail('chat usage', ch.usage, 'completion tokens');

let chatStreamed = '';
const cs = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, stream: true });
for await (const chunk of cs) chatStreamed += chunk.choices?.[0]?.delta?.content ?? '';
if (chatStreamed !== content) fail('streamed chat text', chatStreamed, content);

const wrong = new OpenAI({ baseURL: env('TL_BASE_URL'), apiKey: 'wrong-key', maxRetries: 0 });
try {
    await wrong.completions.create({ model, prompt, max_tokens: 1 });
    fail('a wrong key', 'accepted', '401');
} catch (e) {
    if (!(e instanceof OpenAI.APIError) || e.status !== 401) fail('a wrong key', e.status ?? String(e), 401);
}
console.log(`openai client: completions, streaming, chat, models, auth OK (${model})`);

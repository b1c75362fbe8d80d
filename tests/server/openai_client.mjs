// The official `openai` npm client against `gemma4 serve` (run by openai_client_test.cpp, which
// installs the package and starts the server): chat with and without streaming, usage, stop
// strings, a tool-call round trip, tool_choice, an image message, and errors as the client's typed errors.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.GEMMA4_BASE_URL;
const apiKey = process.env.GEMMA4_API_KEY;
const model = process.env.GEMMA4_MODEL;
const image = process.env.GEMMA4_IMAGE_DATA_URL;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });

const user = (content) => [{ role: 'user', content }];

// Chat, not streamed: a reply, a finish reason, usage that adds up.
const plain = await client.chat.completions.create({ model, messages: user('Hello!'), max_tokens: 6, temperature: 0 });
assert.equal(plain.object, 'chat.completion');
const reply = plain.choices[0].message.content;
assert.equal(typeof reply, 'string');
assert.ok(['stop', 'length'].includes(plain.choices[0].finish_reason));
assert.ok(plain.usage.prompt_tokens > 0);
assert.ok(plain.usage.completion_tokens >= 1 && plain.usage.completion_tokens <= 6);
assert.equal(plain.usage.total_tokens, plain.usage.prompt_tokens + plain.usage.completion_tokens);

// Streamed: the same greedy reply, then a usage chunk.
const stream = await client.chat.completions.create({
  model, messages: user('Hello!'), max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let streamed = '';
let finish = null;
let usage = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    streamed += choice.delta.content ?? '';
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
assert.equal(streamed, reply);
assert.equal(finish, plain.choices[0].finish_reason);
assert.equal(usage.completion_tokens, plain.usage.completion_tokens);

// A stop string: the reply ends right before it.
const longer = (await client.chat.completions.create({ model, messages: user('Count'), max_tokens: 12, temperature: 0 })).choices[0].message.content;
if (longer.length >= 4) {
  const stop = longer.slice(Math.floor(longer.length / 2), Math.floor(longer.length / 2) + 2);
  const cut = await client.chat.completions.create({ model, messages: user('Count'), max_tokens: 12, temperature: 0, stop: [stop] });
  assert.equal(cut.choices[0].message.content, longer.slice(0, longer.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, 'stop');
}

// A tool-call round trip: declarations, the assistant's call, the tool's result, the next turn.
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather',
    parameters: { type: 'object', properties: { city: { type: 'string', description: 'City' } }, required: ['city'] },
  },
}];
const withTools = await client.chat.completions.create({ model, tools, messages: user('Weather in Paris?'), max_tokens: 4, temperature: 0 });
assert.ok(['stop', 'length', 'tool_calls'].includes(withTools.choices[0].finish_reason));
const roundTrip = await client.chat.completions.create({
  model, tools, max_tokens: 4, temperature: 0,
  messages: [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"sky":"clear","celsius":21}' },
  ],
});
assert.equal(roundTrip.object, 'chat.completion');
assert.ok(roundTrip.usage.prompt_tokens > withTools.usage.prompt_tokens);

// tool_choice: "required" prefills the opening of a call (one more prompt token); a named
// function also its name, which the stream's first tool_calls delta carries before anything is
// generated; an undeclared name is a 400 naming the field.
const required = await client.chat.completions.create({
  model, tools, tool_choice: 'required', messages: user('Weather in Paris?'), max_tokens: 4, temperature: 0,
});
assert.equal(required.usage.prompt_tokens, withTools.usage.prompt_tokens + 1);
const forced = await client.chat.completions.create({
  model, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, messages: user('Weather in Paris?'),
  max_tokens: 3, temperature: 0, stream: true,
});
let forcedName = null;
for await (const chunk of forced)
  for (const choice of chunk.choices)
    for (const call of choice.delta.tool_calls ?? []) forcedName ??= call.function?.name ?? null;
assert.equal(forcedName, 'get_weather');

// An image message (data: URL).
const seen = await client.chat.completions.create({
  model, max_tokens: 3, temperature: 0,
  messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url: image } }] }],
});
assert.ok(seen.usage.prompt_tokens > 10);

// Errors arrive as the client's typed errors.
const rejects = async (promise, type, check = () => {}) => {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof type, `expected ${type.name}, got ${e.constructor.name}: ${e.message}`);
    check(e);
    return;
  }
  assert.fail(`expected ${type.name}`);
};
await rejects(new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 }).chat.completions.create({ model, messages: user('x') }),
  OpenAI.AuthenticationError);
await rejects(client.chat.completions.create({ model: 'gpt-4o', messages: user('x') }), OpenAI.NotFoundError);
await rejects(client.chat.completions.create({ model, messages: user('x'), n: 2 }), OpenAI.BadRequestError);
await rejects(client.chat.completions.create({
  model, tools, messages: user('x'), tool_choice: { type: 'function', function: { name: 'get_time' } },
}), OpenAI.BadRequestError, (e) => assert.equal(e.param, 'tool_choice.function.name'));
await rejects(client.chat.completions.create({
  model, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }],
}), OpenAI.BadRequestError, (e) => assert.match(e.message, /not fetched/));
await rejects(client.chat.completions.create({ model, messages: user('x'.repeat(40000)) }), OpenAI.BadRequestError,
  (e) => assert.equal(e.code, 'context_length_exceeded'));

// Models and text completions.
const models = await client.models.list();
assert.equal(models.data[0].id, model);
const text = await client.completions.create({ model, prompt: 'Once upon', max_tokens: 4, temperature: 0 });
assert.equal(typeof text.choices[0].text, 'string');

console.log('openai client: ok');

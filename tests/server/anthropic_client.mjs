// The official `@anthropic-ai/sdk` npm client against `gemma4 serve` (run by
// anthropic_client_test.cpp, which installs the package and starts the server): messages with and
// without streaming, a system prompt, several turns, stop_sequences, a forced tool_use and its
// tool_result, count_tokens, an image block, and errors as the client's typed errors.
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const baseURL = process.env.GEMMA4_BASE_URL;  // the client adds /v1/messages
const apiKey = process.env.GEMMA4_API_KEY;
const model = process.env.GEMMA4_MODEL;
const image = process.env.GEMMA4_IMAGE_DATA_URL;
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });

const user = (content) => [{ role: 'user', content }];
const textOf = (message) => message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
const promptTokens = (usage) => usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens;

// Not streamed: a message of text blocks, a stop reason, usage.
const plain = await client.messages.create({ model, max_tokens: 6, temperature: 0, messages: user('Hello!') });
assert.equal(plain.type, 'message');
assert.equal(plain.role, 'assistant');
assert.equal(plain.model, model);
assert.ok(plain.id.startsWith('msg_'));
assert.ok(['end_turn', 'max_tokens'].includes(plain.stop_reason));
assert.ok(plain.usage.output_tokens >= 1 && plain.usage.output_tokens <= 6);
assert.ok(promptTokens(plain.usage) > 0);

// Streamed with the client's helper: the same greedy text, the same stop reason and usage.
const helper = client.messages.stream({ model, max_tokens: 6, temperature: 0, messages: user('Hello!') });
let streamedText = '';
helper.on('text', (delta) => { streamedText += delta; });
const final = await helper.finalMessage();
assert.equal(streamedText, textOf(plain));
assert.equal(textOf(final), textOf(plain));
assert.equal(final.stop_reason, plain.stop_reason);
assert.equal(final.usage.output_tokens, plain.usage.output_tokens);
assert.equal(promptTokens(final.usage), promptTokens(plain.usage));

// Streamed raw: Anthropic's event types in their order.
const types = [];
for await (const event of await client.messages.create({ model, max_tokens: 4, temperature: 0, messages: user('Hello!'), stream: true }))
  types.push(event.type);
assert.equal(types[0], 'message_start');
assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
if (types.includes('content_block_start')) assert.ok(types.indexOf('content_block_delta') > types.indexOf('content_block_start'));

// A system prompt (a string or text blocks: the same prompt) and several turns.
const system = await client.messages.create({ model, max_tokens: 3, temperature: 0, system: 'Answer briefly.', messages: user('Hello!') });
const systemBlocks = await client.messages.create({
  model, max_tokens: 3, temperature: 0, system: [{ type: 'text', text: 'Answer briefly.' }], messages: user('Hello!'),
});
assert.equal(promptTokens(systemBlocks.usage), promptTokens(system.usage));
assert.ok(promptTokens(system.usage) > promptTokens(plain.usage));
const turns = await client.messages.create({
  model, max_tokens: 3, temperature: 0,
  messages: [{ role: 'user', content: 'Hello!' }, { role: 'assistant', content: 'Hi.' }, { role: 'user', content: 'How are you?' }],
});
assert.ok(promptTokens(turns.usage) > promptTokens(plain.usage));

// stop_sequences: the reply ends right before it, and says which one.
const longer = textOf(await client.messages.create({ model, max_tokens: 12, temperature: 0, messages: user('Count') }));
if (longer.length >= 4) {
  const stop = longer.slice(Math.floor(longer.length / 2), Math.floor(longer.length / 2) + 2);
  const cut = await client.messages.create({ model, max_tokens: 12, temperature: 0, messages: user('Count'), stop_sequences: ['@@never@@', stop] });
  assert.equal(textOf(cut), longer.slice(0, longer.indexOf(stop)));
  assert.equal(cut.stop_reason, 'stop_sequence');
  assert.equal(cut.stop_sequence, stop);
}

// count_tokens: the prompt /v1/messages counts, without max_tokens.
const counted = await client.messages.countTokens({ model, system: 'Answer briefly.', messages: user('Hello!') });
assert.equal(counted.input_tokens, promptTokens(system.usage));

// A forced tool_use (tool_choice names the tool, one call), its input valid against the schema
// (the grammar of Gemma's call syntax), then its tool_result in the next turn.
const tools = [{
  name: 'get_weather', description: 'Current weather',
  input_schema: {
    type: 'object',
    properties: { city: { type: 'string', maxLength: 20 }, days: { type: 'integer', minimum: 1, maximum: 14 } },
    required: ['city', 'days'], additionalProperties: false,
  },
}];
const question = user('Weather in Paris?');
const called = await client.messages.create({
  model, max_tokens: 120, temperature: 0, tools, tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true }, messages: question,
});
assert.equal(called.stop_reason, 'tool_use');
const uses = called.content.filter((b) => b.type === 'tool_use');
assert.equal(uses.length, 1);
const [use] = uses;
assert.equal(use.name, 'get_weather');
assert.ok(use.id.startsWith('toolu_'));
assert.deepEqual(Object.keys(use.input).sort(), ['city', 'days']);
assert.ok([...use.input.city].length <= 20);
assert.ok(Number.isInteger(use.input.days) && use.input.days >= 1 && use.input.days <= 14);
// The same call streamed: its input_json_delta fragments build the same input.
const streamedCall = await client.messages.stream({
  model, max_tokens: 120, temperature: 0, tools, tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true }, messages: question,
}).finalMessage();
assert.equal(streamedCall.stop_reason, 'tool_use');
assert.deepEqual(streamedCall.content.filter((b) => b.type === 'tool_use').map((b) => b.input), [use.input]);
const answered = await client.messages.create({
  model, max_tokens: 4, temperature: 0, tools,
  messages: [
    ...question,
    { role: 'assistant', content: called.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"sky":"clear","celsius":21}' }] },
  ],
});
assert.equal(answered.type, 'message');
assert.ok(promptTokens(answered.usage) > promptTokens(called.usage));

// An image block (base64 PNG): its soft tokens are in the prompt.
const data = image.slice(image.indexOf(',') + 1);
const seen = await client.messages.create({
  model, max_tokens: 3, temperature: 0,
  messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data } }] }],
});
assert.ok(promptTokens(seen.usage) > promptTokens(plain.usage) + 10);

// Errors arrive as the client's typed errors, in Anthropic's error shape naming the field.
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
await rejects(new Anthropic({ baseURL, apiKey: 'wrong', maxRetries: 0 }).messages.create({ model, max_tokens: 3, messages: user('x') }),
  Anthropic.AuthenticationError, (e) => assert.equal(e.error.error.type, 'authentication_error'));
const namesField = (field) => (e) => {
  assert.equal(e.error.type, 'error');
  assert.equal(e.error.error.type, 'invalid_request_error');
  assert.ok(e.error.error.message.startsWith(`${field}: `), e.error.error.message);
};
await rejects(client.messages.create({ model, max_tokens: 3, temperature: 1.5, messages: user('x') }), Anthropic.BadRequestError, namesField('temperature'));
await rejects(client.messages.create({ model, max_tokens: 3, temperature: 1.5, messages: user('x'), stream: true }), Anthropic.BadRequestError,
  namesField('temperature'));
await rejects(client.messages.create({ model, max_tokens: 3, tools, tool_choice: { type: 'tool', name: 'get_time' }, messages: user('x') }),
  Anthropic.BadRequestError, namesField('tool_choice.name'));
await rejects(client.messages.create({
  model, max_tokens: 3, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'https://example.com/cat.png' } }] }],
}), Anthropic.BadRequestError, namesField('messages[0].content[0].source.url'));
await rejects(client.messages.create({ model: 'claude-x', max_tokens: 3, messages: user('x') }), Anthropic.NotFoundError);
await rejects(client.messages.countTokens({ model, messages: [] }), Anthropic.BadRequestError, namesField('messages'));

console.log('anthropic client: ok');

// The official `openai` npm client against `gemma4 serve` (run by openai_client_test.cpp, which
// installs the package and starts the server): chat with and without streaming, usage, stop
// strings, n choices, a tool-call round trip, tool_choice, an image message, logit_bias, seeds, penalties,
// min_tokens, the model's alias, structured output (json_schema, json_object), logprobs, errors
// as the client's typed errors, and the Responses API (text, streamed events, a function call).
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.GEMMA4_BASE_URL;
const apiKey = process.env.GEMMA4_API_KEY;
const model = process.env.GEMMA4_MODEL;
const alias = process.env.GEMMA4_MODEL_ALIAS;
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

// n = 2: two indexed choices, the prompt counted once; streamed, each choice's deltas add up to it.
const two = await client.chat.completions.create({ model, messages: user('Hello!'), max_tokens: 6, temperature: 1, seed: 3, n: 2 });
assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
assert.equal(two.usage.prompt_tokens, plain.usage.prompt_tokens);
const twoStreamed = ['', ''];
let twoUsage = null;
for await (const chunk of await client.chat.completions.create({
  model, messages: user('Hello!'), max_tokens: 6, temperature: 1, seed: 3, n: 2, stream: true, stream_options: { include_usage: true },
})) {
  if (chunk.usage) twoUsage = chunk.usage;
  for (const choice of chunk.choices) twoStreamed[choice.index] += choice.delta.content ?? '';
}
assert.deepEqual(twoStreamed, two.choices.map((c) => c.message.content));
assert.equal(twoUsage.completion_tokens, two.usage.completion_tokens);

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

// Sampling fields: logit_bias forcing an id, a seed, the penalties and vLLM's and llama-server's
// fields (min_tokens, repetition_penalty, repeat_last_n), asked for under the model's alias,
// streamed and not. Soft-capped logits lie within ±30, so a bias of +100 leaves no other choice.
const root = baseURL.replace(/\/v1$/, '');
const post = async (path, body) => {
  const r = await fetch(`${root}${path}`, {
    method: 'POST', headers: { Authorization: `Bearer ${apiKey}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  assert.equal(r.status, 200);
  return r.json();
};
const [word] = (await post('/tokenize', { content: 'the' })).tokens;
const endOfTurn = (await post('/tokenize', { content: '<turn|>' })).tokens;
assert.equal(endOfTurn.length, 1);
const wordTimes = async (n) => (await post('/detokenize', { tokens: Array(n).fill(word) })).content;
const chatText = async (body) => {
  if (!body.stream) return (await client.chat.completions.create(body)).choices[0].message.content;
  let text = '';
  for await (const chunk of await client.chat.completions.create(body))
    for (const choice of chunk.choices) text += choice.delta.content ?? '';
  return text;
};
const completionText = async (body) => {
  if (!body.stream) return (await client.completions.create(body)).choices[0].text;
  let text = '';
  for await (const chunk of await client.completions.create(body))
    for (const choice of chunk.choices) text += choice.text ?? '';
  return text;
};

const forcedChat = { model: alias, messages: user('Hello!'), max_tokens: 4, temperature: 1, seed: 5, logit_bias: { [word]: 100 } };
const biased = await client.chat.completions.create(forcedChat);
assert.equal(biased.choices[0].message.content, await wordTimes(4));
assert.equal(biased.model, model);  // the served name, whichever of its names was asked for
assert.equal(await chatText({ ...forcedChat, stream: true }), await wordTimes(4));
const forcedText = { model: alias, prompt: 'Once upon', max_tokens: 3, temperature: 0, logit_bias: { [word]: 100 } };
assert.equal(await completionText(forcedText), await wordTimes(3));
assert.equal(await completionText({ ...forcedText, stream: true }), await wordTimes(3));

const seeded = {
  model: alias, messages: user('Tell me something'), max_tokens: 8, temperature: 1.5, top_p: 0.95, seed: 1234,
  frequency_penalty: 0.5, presence_penalty: -0.5, repetition_penalty: 1.3, repeat_last_n: 16,
};
const once = await chatText(seeded);
assert.equal(await chatText(seeded), once);
assert.equal(await chatText({ ...seeded, stream: true }), once);
const seededText = { ...seeded, messages: undefined, prompt: 'Once upon' };
assert.equal(await completionText({ ...seededText, stream: true }), await completionText(seededText));

// min_tokens holds back the end of turn that a bias forces: three ids, then the end.
const endForced = { model, messages: user('Hello!'), max_tokens: 10, temperature: 0, logit_bias: { [endOfTurn[0]]: 100 } };
assert.equal((await client.chat.completions.create(endForced)).usage.completion_tokens, 1);
assert.equal((await client.chat.completions.create({ ...endForced, min_tokens: 3 })).usage.completion_tokens, 4);
let heldUsage = null;
for await (const chunk of await client.chat.completions.create({ ...endForced, min_tokens: 3, stream: true, stream_options: { include_usage: true } }))
  if (chunk.usage) heldUsage = chunk.usage;
assert.equal(heldUsage.completion_tokens, 4);

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
await rejects(client.chat.completions.create({ model, messages: user('x'), n: 9 }), OpenAI.BadRequestError, (e) => assert.equal(e.param, 'n'));
await rejects(client.chat.completions.create({
  model, tools, messages: user('x'), tool_choice: { type: 'function', function: { name: 'get_time' } },
}), OpenAI.BadRequestError, (e) => assert.equal(e.param, 'tool_choice.function.name'));
await rejects(client.chat.completions.create({
  model, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }],
}), OpenAI.BadRequestError, (e) => assert.match(e.message, /not fetched/));
await rejects(client.chat.completions.create({ model, messages: user('x'.repeat(40000)) }), OpenAI.BadRequestError,
  (e) => assert.equal(e.code, 'context_length_exceeded'));
const badParam = (param) => (e) => assert.equal(e.param, param);
for (const [fields, param] of [
  [{ logit_bias: { [word]: 150 } }, 'logit_bias'],
  [{ logit_bias: { 999999: 1 } }, 'logit_bias'],
  [{ logit_bias: { abc: 1 } }, 'logit_bias'],
  [{ frequency_penalty: 2.5 }, 'frequency_penalty'],
  [{ presence_penalty: -2.5 }, 'presence_penalty'],
  [{ repetition_penalty: 0 }, 'repetition_penalty'],
  [{ min_tokens: 5, max_tokens: 2 }, 'min_tokens'],
]) {
  await rejects(client.chat.completions.create({ model, messages: user('x'), ...fields }), OpenAI.BadRequestError, badParam(param));
  await rejects(client.chat.completions.create({ model, messages: user('x'), stream: true, ...fields }), OpenAI.BadRequestError, badParam(param));
  await rejects(client.completions.create({ model, prompt: 'x', ...fields }), OpenAI.BadRequestError, badParam(param));
}

// Models and text completions.
const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), [model, alias]);
assert.equal((await client.models.retrieve(alias)).id, alias);
const text = await client.completions.create({ model, prompt: 'Once upon', max_tokens: 4, temperature: 0 });
assert.equal(typeof text.choices[0].text, 'string');

// Structured output: a json_schema reply parses and validates (checked here by hand), streamed
// and not; json_object gives an object; a schema keyword the compiler does not know is a 400.
const schema = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 20 },
    celsius: { type: 'integer', minimum: -60, maximum: 60 },
    sky: { enum: ['clear', 'cloudy', 'rain'] },
  },
  required: ['city', 'celsius', 'sky'],
  additionalProperties: false,
};
const checkWeather = (text) => {
  const v = JSON.parse(text);
  assert.deepEqual(Object.keys(v).sort(), ['celsius', 'city', 'sky']);
  assert.equal(typeof v.city, 'string');
  assert.ok([...v.city].length <= 20);  // maxLength counts code points, not UTF-16 units
  assert.ok(Number.isInteger(v.celsius) && v.celsius >= -60 && v.celsius <= 60);
  assert.ok(['clear', 'cloudy', 'rain'].includes(v.sky));
};
const responseFormat = { type: 'json_schema', json_schema: { name: 'weather', schema, strict: true } };
for (const seed of [1, 2, 3]) {
  const structured = await client.chat.completions.create({
    model, messages: user('Weather in Paris as JSON?'), max_tokens: 120, temperature: 1, seed, response_format: responseFormat,
  });
  assert.equal(structured.choices[0].finish_reason, 'stop');
  checkWeather(structured.choices[0].message.content);
  const streamedStructured = await client.chat.completions.create({
    model, messages: user('Weather in Paris as JSON?'), max_tokens: 120, temperature: 1, seed, response_format: responseFormat, stream: true,
  });
  let streamedJson = '';
  for await (const chunk of streamedStructured) for (const choice of chunk.choices) streamedJson += choice.delta.content ?? '';
  assert.equal(streamedJson, structured.choices[0].message.content);
}
// Any object: its strings are unbounded, so a random model may run to max_tokens inside one;
// the text is then the start of an object.
const anyObject = await client.chat.completions.create({
  model, messages: user('Anything as JSON'), max_tokens: 120, seed: 4, response_format: { type: 'json_object' },
});
const objectText = anyObject.choices[0].message.content;
if (anyObject.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(objectText), 'object');
else assert.ok(objectText.startsWith('{'));
await rejects(client.chat.completions.create({
  model, messages: user('x'),
  response_format: { type: 'json_schema', json_schema: { name: 'bad', schema: { type: 'object', patternProperties: {} } } },
}), OpenAI.BadRequestError, (e) => { assert.equal(e.param, 'response_format.json_schema.schema'); assert.match(e.message, /patternProperties/); });

// Log-probabilities: one entry per generated token but a dropped end of turn, each <= 0 with its
// alternatives most likely first (greedy: the token itself first); a stream's chunks carry the
// same entries; the completions' parallel arrays; top_logprobs without logprobs is a 400.
const endDropped = (r) => (r.choices[0].finish_reason === 'stop' ? 1 : 0);
const withLogprobs = { model, messages: user('Hello!'), max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 };
const scored = await client.chat.completions.create(withLogprobs);
const entries = scored.choices[0].logprobs.content;
assert.equal(entries.length, scored.usage.completion_tokens - endDropped(scored));
for (const e of entries) {
  assert.ok(e.logprob <= 0);
  assert.ok(Array.isArray(e.bytes) && e.bytes.length > 0);
  assert.equal(e.top_logprobs.length, 2);
  assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
  assert.equal(e.top_logprobs[0].token, e.token);
}
const streamedEntries = [];
for await (const chunk of await client.chat.completions.create({ ...withLogprobs, stream: true }))
  for (const choice of chunk.choices) streamedEntries.push(...(choice.logprobs?.content ?? []));
assert.deepEqual(streamedEntries, entries);
const scoredText = await client.completions.create({ model, prompt: 'Once upon', max_tokens: 5, temperature: 0, logprobs: 3 });
const textLogprobs = scoredText.choices[0].logprobs;
assert.equal(textLogprobs.tokens.length, scoredText.usage.completion_tokens - endDropped(scoredText));
for (const key of ['token_logprobs', 'top_logprobs', 'text_offset']) assert.equal(textLogprobs[key].length, textLogprobs.tokens.length);
for (const top of textLogprobs.top_logprobs) {
  const values = Object.values(top);
  assert.ok(values.length >= 1 && values.length <= 3);
  for (let k = 1; k < values.length; ++k) assert.ok(values[k] <= values[k - 1]);
}
await rejects(client.chat.completions.create({ model, messages: user('x'), top_logprobs: 2 }), OpenAI.BadRequestError, badParam('top_logprobs'));
await rejects(client.completions.create({ model, prompt: 'x', logprobs: 21 }), OpenAI.BadRequestError, badParam('logprobs'));

// A forced call under tool_choice "required" (one: a random model would go on calling): always
// there, its arguments valid against the tool's schema (the grammar of Gemma's call syntax),
// checked here by hand.
const strictTools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 20 }, days: { type: 'integer', minimum: 1, maximum: 14 } },
      required: ['city', 'days'], additionalProperties: false,
    },
  },
}];
for (const seed of [1, 2]) {
  const forcedCall = await client.chat.completions.create({
    model, tools: strictTools, tool_choice: 'required', parallel_tool_calls: false, messages: user('Weather in Paris?'),
    max_tokens: 120, temperature: 1, seed,
  });
  assert.equal(forcedCall.choices[0].finish_reason, 'tool_calls');
  const calls = forcedCall.choices[0].message.tool_calls;
  assert.equal(calls.length, 1);
  for (const call of calls) {
    assert.equal(call.function.name, 'get_weather');
    const args = JSON.parse(call.function.arguments);
    assert.deepEqual(Object.keys(args).sort(), ['city', 'days']);
    assert.ok([...args.city].length <= 20);
    assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 14);
  }
}

// The Responses API: text output (and the client's output_text), instructions, a message list,
// max_output_tokens, streamed events that add up to the response, a forced function call and its
// output fed back; stored or chained responses are refused.
const answer = await client.responses.create({ model, instructions: 'Answer briefly.', input: 'Hello!', max_output_tokens: 6, temperature: 0 });
assert.equal(answer.object, 'response');
assert.ok(['completed', 'incomplete'].includes(answer.status));
assert.equal(answer.instructions, 'Answer briefly.');
assert.equal(typeof answer.output_text, 'string');
const texts = answer.output.filter((item) => item.type === 'message').flatMap((item) => item.content).filter((c) => c.type === 'output_text');
assert.equal(answer.output_text, texts.map((c) => c.text).join(''));
assert.ok(answer.usage.output_tokens >= 1 && answer.usage.output_tokens <= 6);
assert.equal(answer.usage.total_tokens, answer.usage.input_tokens + answer.usage.output_tokens);
const asList = await client.responses.create({
  model, input: [{ role: 'system', content: 'Answer briefly.' }, { role: 'user', content: [{ type: 'input_text', text: 'Hello!' }] }],
  max_output_tokens: 6, temperature: 0,
});
assert.equal(asList.output_text, answer.output_text);
assert.equal(asList.usage.input_tokens, answer.usage.input_tokens);

const eventTypes = [];
let deltas = '';
let completed = null;
for await (const event of await client.responses.create({
  model, instructions: 'Answer briefly.', input: 'Hello!', max_output_tokens: 6, temperature: 0, stream: true,
})) {
  eventTypes.push(event.type);
  if (event.type === 'response.output_text.delta') deltas += event.delta;
  if (event.type === 'response.completed' || event.type === 'response.incomplete') completed = event.response;
}
assert.deepEqual(eventTypes.slice(0, 2), ['response.created', 'response.in_progress']);
assert.ok(['response.completed', 'response.incomplete'].includes(eventTypes.at(-1)));
assert.equal(deltas, answer.output_text);
assert.equal(completed.status, answer.status);
if (deltas) {
  for (const type of ['response.output_item.added', 'response.content_part.added', 'response.output_text.done', 'response.content_part.done',
    'response.output_item.done'])
    assert.ok(eventTypes.includes(type), type);
}

const functionTools = [{
  type: 'function', name: 'get_weather', description: 'Current weather',
  parameters: strictTools[0].function.parameters,
}];
const functionCall = await client.responses.create({
  model, tools: functionTools, tool_choice: { type: 'function', name: 'get_weather' }, parallel_tool_calls: false,
  input: 'Weather in Paris?', max_output_tokens: 120, temperature: 0,
});
assert.equal(functionCall.status, 'completed');
const calls = functionCall.output.filter((item) => item.type === 'function_call');
assert.equal(calls.length, 1);
assert.equal(calls[0].name, 'get_weather');
assert.ok(calls[0].call_id.startsWith('call_'));
const callArgs = JSON.parse(calls[0].arguments);
assert.deepEqual(Object.keys(callArgs).sort(), ['city', 'days']);
assert.ok(Number.isInteger(callArgs.days) && callArgs.days >= 1 && callArgs.days <= 14);
let streamedArgs = '';
for await (const event of await client.responses.create({
  model, tools: functionTools, tool_choice: { type: 'function', name: 'get_weather' }, parallel_tool_calls: false,
  input: 'Weather in Paris?', max_output_tokens: 120, temperature: 0, stream: true,
}))
  if (event.type === 'response.function_call_arguments.delta') streamedArgs += event.delta;
assert.equal(streamedArgs, calls[0].arguments);
const fedBack = await client.responses.create({
  model, tools: functionTools, max_output_tokens: 4, temperature: 0,
  input: [
    { role: 'user', content: 'Weather in Paris?' },
    { type: 'function_call', call_id: calls[0].call_id, name: 'get_weather', arguments: calls[0].arguments },
    { type: 'function_call_output', call_id: calls[0].call_id, output: '{"sky":"clear","celsius":21}' },
  ],
});
assert.equal(fedBack.object, 'response');
assert.ok(fedBack.usage.input_tokens > functionCall.usage.input_tokens);
await rejects(client.responses.create({ model, input: 'x', previous_response_id: 'resp_1' }), OpenAI.BadRequestError, badParam('previous_response_id'));
await rejects(client.responses.create({ model, input: 'x', store: true }), OpenAI.BadRequestError, badParam('store'));
await rejects(client.responses.create({ model, input: 'x', temperature: 3 }), OpenAI.BadRequestError, badParam('temperature'));

console.log('openai client: ok');

// Shared cases of the structured-output end-to-end tests (structured.test.mjs on the embedded V4.1 model,
// structured_0731.test.mjs on a synthesized V4-Flash-0731 model): real clients from npm — the `openai` client, the
// Vercel AI SDK (generateObject with a zod schema, streamText with tools) and LangChain JS (withStructuredOutput,
// tool calling). The models have random weights, so nothing but the constraint can make an output valid: every
// expectation is "parses and validates against the schema", checked by zod, a validator independent of the server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { generateObject, streamText, tool } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';

// Bounded strings and lists, so that random weights reach the end well within max_tokens.
export const Person = z.object({
  name: z.string().max(8),
  age: z.number().int(),
  mood: z.enum(['calm', 'busy']),
  tags: z.array(z.string().max(4)).max(2),
  ok: z.boolean(),
});
const personSchema = z.toJSONSchema(Person);
const Weather = z.object({ city: z.string().max(8), unit: z.enum(['c', 'f']), days: z.number().int().min(1).max(7) });

// Thinking off (the constraint would start only after a reasoning block that random weights never close) and room
// for the whole object, added to each request body as a client-side fetch wrapper would.
function noThinkFetch(maxTokens) {
  return (url, init) => {
    const body = JSON.parse(init.body);
    body.chat_template_kwargs = { thinking: false };
    body.max_tokens = maxTokens;
    return fetch(url, { ...init, body: JSON.stringify(body) });
  };
}

export function structuredCases(getServer, model, { maxTokens = 400 } = {}) {
  const ai = () => createOpenAI({ baseURL: `${getServer().url}/v1`, apiKey: 'unused', fetch: noThinkFetch(maxTokens) });
  const lc = (extra = {}) =>
    new ChatOpenAI({
      model,
      apiKey: 'unused',
      configuration: { baseURL: `${getServer().url}/v1` },
      temperature: 0.8,
      maxTokens,
      maxRetries: 0,
      modelKwargs: { chat_template_kwargs: { thinking: false } },
      ...extra,
    });

  test('openai client: json_schema, streamed and whole, parses and validates', async () => {
    const client = getServer().client();
    for (const stream of [false, true]) {
      for (const seed of [1, 2]) {
        const req = {
          model,
          messages: [{ role: 'user', content: 'Describe a person.' }],
          response_format: { type: 'json_schema', json_schema: { name: 'person', schema: personSchema, strict: true } },
          chat_template_kwargs: { thinking: false },
          max_tokens: maxTokens,
          temperature: 0.8,
          seed,
        };
        let content = '';
        let finish = null;
        if (stream) {
          for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
            content += chunk.choices[0]?.delta?.content ?? '';
            finish = chunk.choices[0]?.finish_reason ?? finish;
          }
        } else {
          const r = await client.chat.completions.create(req);
          content = r.choices[0].message.content;
          finish = r.choices[0].finish_reason;
        }
        assert.equal(finish, 'stop', content);
        const parsed = Person.safeParse(JSON.parse(content));
        assert.ok(parsed.success, `${content}\n${JSON.stringify(parsed.error?.issues)}`);
      }
    }
  });

  test('openai client: json_object gives one JSON object', async () => {
    const r = await getServer().client().chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Reply in JSON.' }],
      response_format: { type: 'json_object' },
      chat_template_kwargs: { thinking: false },
      max_tokens: 120,
      temperature: 0,
    });
    const c = r.choices[0];
    // Random weights may run out of tokens inside an open object; what was written is a prefix of JSON either way.
    if (c.finish_reason === 'stop') assert.equal(typeof JSON.parse(c.message.content), 'object');
    assert.match(c.message.content.trimStart(), /^\{/);
  });

  test('Vercel AI SDK: generateObject with a zod schema', async () => {
    for (const seed of [3, 4]) {
      const { object } = await generateObject({ model: ai().chat(model), schema: Person, prompt: 'Describe a person.', seed, temperature: 0.8, maxRetries: 0 });
      assert.ok(Person.safeParse(object).success, JSON.stringify(object));
    }
  });

  test('Vercel AI SDK: streamText with a required tool gives arguments that validate', async () => {
    const result = streamText({
      model: ai().chat(model),
      prompt: 'What is the weather in Paris?',
      toolChoice: 'required',
      tools: { weather: tool({ description: 'Weather forecast', inputSchema: Weather }) },
      seed: 5,
      temperature: 0.8,
      maxRetries: 0,
    });
    const calls = [];
    for await (const part of result.fullStream) {
      if (part.type === 'tool-call') calls.push(part);
      if (part.type === 'error') throw part.error;
    }
    assert.ok(calls.length >= 1);
    for (const call of calls) {
      assert.equal(call.toolName, 'weather');
      assert.ok(Weather.safeParse(call.input).success, JSON.stringify(call.input));
    }
  });

  test('LangChain JS: withStructuredOutput (JSON schema and function calling)', async () => {
    for (const method of ['jsonSchema', 'functionCalling']) {
      const out = await lc().withStructuredOutput(Person, { method, name: 'person' }).invoke('Describe a person.');
      assert.ok(Person.safeParse(out).success, `${method}: ${JSON.stringify(out)}`);
    }
  });

  test('LangChain JS: tool calling with several tools, every call validates', async () => {
    const tools = [
      { type: 'function', function: { name: 'weather', description: 'Weather', parameters: z.toJSONSchema(Weather), strict: true } },
      { type: 'function', function: { name: 'lookup', description: 'Find a person', parameters: personSchema, strict: true } },
    ];
    const msg = await lc().bindTools(tools, { tool_choice: 'required', parallel_tool_calls: false }).invoke('Weather in Paris?');
    assert.equal(msg.tool_calls.length, 1, JSON.stringify(msg.tool_calls));
    for (const call of msg.tool_calls) {
      const schema = call.name === 'weather' ? Weather : Person;
      assert.ok(['weather', 'lookup'].includes(call.name));
      assert.ok(schema.safeParse(call.args).success, `${call.name}: ${JSON.stringify(call.args)}`);
    }
  });

  test('a schema keyword the server cannot hold is a 400 naming it; the server keeps serving', async () => {
    const client = getServer().client();
    await assert.rejects(
      client.chat.completions.create({
        model,
        messages: [{ role: 'user', content: 'x' }],
        response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'string', pattern: '^a+$' } } },
      }),
      (e) => e.status === 400 && /'pattern'/.test(e.message) && e.param === 'response_format.json_schema.schema',
    );
    const big = { type: 'object', properties: { v: { enum: Array.from({ length: 5000 }, (_, i) => i) } } };
    await assert.rejects(
      client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_schema', json_schema: { name: 'p', schema: big } } }),
      (e) => e.status === 400 && /'enum' has 5000 values/.test(e.message),
    );
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
    assert.equal(r.choices.length, 1);
  });
}

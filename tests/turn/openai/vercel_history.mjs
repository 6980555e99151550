// The Vercel AI SDK's default OpenAI provider (`createOpenAI({ baseURL })(model)`, the
// Responses API with `store` on) as a chat app runs it: each turn's request holds the earlier
// turns' messages, the assistant ones as the SDK returned them (`response.messages`), which
// the provider sends back as `item_reference`s to the stored items. Modes (CHATGATE_MODE):
//   cases: for each tag of CHATGATE_CASE_KEYS, three turns (generateText, streamText,
//          generateText), one JSON line each;
//   prompts: for each prompt of CHATGATE_PROMPTS (a thinking model's scenarios), the same;
//   tool: a tool round (the SDK runs the tool) and then a second user turn.
// Each line has each turn's text and reasoning and the input item types the provider sent.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";

const openai = createOpenAI({
  baseURL: process.env.CHATGATE_BASE_URL,
  apiKey: process.env.CHATGATE_API_KEY,
});
const model = openai(process.env.CHATGATE_MODEL);
const mode = process.env.CHATGATE_MODE;

function sentItems(request) {
  const body = typeof request.body === "string" ? JSON.parse(request.body) : request.body;
  return body.input.map((item) => (item.type === "item_reference" ? item.id.split("_")[0]
    : item.type ?? item.role));
}

async function turn(kind, messages, extra = {}) {
  const options = { model, messages, maxRetries: 0, ...extra };
  if (kind === "stream") {
    const errors = [];
    const stream = streamText({ ...options, onError: ({ error }) => errors.push(String(error)) });
    let text = "";
    for await (const piece of stream.textStream) text += piece;
    if (errors.length) throw new Error(errors.join("; "));
    const steps = await stream.steps;
    return { text, reasoning: (await stream.reasoningText) ?? "",
             sent: sentItems(steps[steps.length - 1].request),
             messages: (await stream.response).messages };
  }
  const result = await generateText(options);
  return { text: result.text, reasoning: result.reasoningText ?? "",
           sent: sentItems(result.steps[result.steps.length - 1].request),
           messages: result.response.messages, steps: result.steps.length };
}

async function conversation(key, asks) {
  const messages = [];
  const turns = [];
  for (const [index, [kind, content]] of asks.entries()) {
    messages.push({ role: "user", content });
    const done = await turn(kind, messages);
    messages.push(...done.messages);
    turns.push({ turn: index + 1, text: done.text, reasoning: done.reasoning, sent: done.sent });
  }
  console.log(JSON.stringify({ key, turns }));
}

if (mode === "cases") {
  for (const key of JSON.parse(process.env.CHATGATE_CASE_KEYS)) {
    await conversation(key, [["whole", `[case:${key}] answer the case`],
                             ["stream", `[case:${key}] and again`],
                             ["whole", `[case:${key}] once more`]]);
  }
} else if (mode === "prompts") {
  for (const prompt of JSON.parse(process.env.CHATGATE_PROMPTS)) {
    await conversation(prompt, [["stream", `${prompt} first`], ["whole", `${prompt} second`],
                                ["stream", `${prompt} third`]]);
  }
} else if (mode === "tool") {
  const key = process.env.CHATGATE_TOOL_KEY;
  const weather = tool({
    description: "The weather in a city",
    inputSchema: jsonSchema({
      type: "object", properties: { city: { type: "string" } }, required: ["city"],
    }),
    execute: async ({ city }) => ({ city, sky: "sunny" }),
  });
  const tools = { get_weather: weather };
  const messages = [{ role: "user", content: `[case:${key}] weather in Brno?` }];
  const first = await turn("whole", messages, { tools, stopWhen: stepCountIs(3) });
  messages.push(...first.messages, { role: "user", content: `[case:${key}-next] and tomorrow?` });
  const second = await turn("stream", messages, { tools });
  console.log(JSON.stringify({ key, turns: [
    { turn: 1, text: first.text, steps: first.steps, sent: first.sent },
    { turn: 2, text: second.text, sent: second.sent }] }));
} else {
  throw new Error(`unknown CHATGATE_MODE ${mode}`);
}

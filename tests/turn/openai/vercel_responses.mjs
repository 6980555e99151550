// The Vercel AI SDK's default OpenAI provider call, `createOpenAI({ baseURL })(model)`, which
// speaks the Responses API, against Chatgate's /v1: for each case tag given, one streamText
// and one generateText; prints one JSON line per case. With CHATGATE_TOOL_KEY, one tool round
// trip instead (the SDK runs the tool and sends its output back). Run by
// tests/turn/openai/test_responses_vercel.py from a folder holding node_modules/ai and
// node_modules/@ai-sdk/openai.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";

const openai = createOpenAI({
  baseURL: process.env.CHATGATE_BASE_URL,
  apiKey: process.env.CHATGATE_API_KEY,
});
const model = openai(process.env.CHATGATE_MODEL);
const toolKey = process.env.CHATGATE_TOOL_KEY;

if (toolKey) {
  const weather = tool({
    description: "The weather in a city",
    inputSchema: jsonSchema({
      type: "object", properties: { city: { type: "string" } }, required: ["city"],
    }),
    execute: async ({ city }) => ({ city, sky: "sunny" }),
  });
  const result = await generateText({
    model, prompt: `[case:${toolKey}] weather in Brno?`, tools: { get_weather: weather },
    stopWhen: stepCountIs(3), maxRetries: 0,
  });
  console.log(JSON.stringify({
    key: toolKey, text: result.text, steps: result.steps.length,
    calls: result.steps.flatMap((s) => s.toolCalls.map((c) => [c.toolName, c.input])),
  }));
} else {
  for (const key of JSON.parse(process.env.CHATGATE_CASE_KEYS)) {
    const prompt = `[case:${key}] answer the case`;
    const errors = [];
    const stream = streamText({ model, prompt, maxRetries: 0, onError: ({ error }) => {
      errors.push(String(error));
    } });
    let streamed = "";
    for await (const piece of stream.textStream) streamed += piece;
    const usage = await stream.usage;
    const whole = await generateText({ model, prompt, maxRetries: 0 });
    console.log(JSON.stringify({
      key, streamed, whole: whole.text, errors, finish: await stream.finishReason,
      inputTokens: usage.inputTokens, outputTokens: usage.outputTokens,
      responseId: whole.response.id,
    }));
  }
}

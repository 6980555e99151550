// openai-node's Responses API against Chatgate's /v1: for each case tag given, one streamed
// and one whole `responses.create`; prints one JSON line per case with what a Node app shows.
// Run by tests/turn/openai/test_responses_node.py from a folder holding node_modules/openai.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.CHATGATE_BASE_URL,
  apiKey: process.env.CHATGATE_API_KEY,
  maxRetries: 0,
});
const model = process.env.CHATGATE_MODEL;
const keys = JSON.parse(process.env.CHATGATE_CASE_KEYS);

// The text of a response's message items (a streamed event's response has no output_text).
const textOf = (response) => response?.output
  .filter((item) => item.type === "message")
  .flatMap((item) => item.content.map((part) => part.text)).join("") ?? null;

for (const key of keys) {
  const input = `[case:${key}] answer the case`;
  const stream = await client.responses.create({ model, input, stream: true, store: false });
  let streamed = "";
  let completed = null;
  for await (const event of stream) {
    if (event.type === "response.output_text.delta") streamed += event.delta;
    if (event.type === "response.completed") completed = event.response;
  }
  const whole = await client.responses.create({ model, input, store: false });
  console.log(JSON.stringify({
    key, streamed, whole: whole.output_text, completedText: textOf(completed),
    metadata: completed?.chatgate?.response_metadata, warnings: completed?.chatgate?.warnings,
    wholeMetadata: whole.chatgate?.response_metadata, usage: completed?.usage,
  }));
}

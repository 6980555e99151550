// The openai-node SDK against Chatgate's /v1: for each case tag given, one streamed and one
// whole completion; prints one JSON line per case with what a Node app would show.
// Run by tests/turn/openai/test_node_client.py from a folder holding node_modules/openai.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.CHATGATE_BASE_URL,
  apiKey: process.env.CHATGATE_API_KEY,
  maxRetries: 0,
});
const model = process.env.CHATGATE_MODEL;
const keys = JSON.parse(process.env.CHATGATE_CASE_KEYS);

for (const key of keys) {
  const messages = [{ role: "user", content: `[case:${key}] answer the case` }];
  const stream = await client.chat.completions.create({
    model, messages, stream: true, stream_options: { include_usage: true },
  });
  let streamed = "";
  let extension = null;
  let usage = null;
  for await (const chunk of stream) {
    for (const choice of chunk.choices) streamed += choice.delta?.content ?? "";
    if (chunk.chatgate && chunk.choices.length) extension = chunk.chatgate;
    if (chunk.usage) usage = chunk.usage;
  }
  const whole = await client.chat.completions.create({ model, messages });
  console.log(JSON.stringify({
    key, streamed, whole: whole.choices[0].message.content,
    metadata: extension?.response_metadata, warnings: extension?.warnings,
    wholeMetadata: whole.chatgate?.response_metadata, usage,
  }));
}

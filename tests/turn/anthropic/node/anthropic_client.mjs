// The anthropic TypeScript SDK against Chatgate's /v1/messages: for each case tag given, one
// streamed (`messages.stream`) and one whole (`messages.create`) message; prints one JSON
// line per case with what a Node app would show. Run by tests/turn/anthropic/test_node_client.py
// from a folder holding the pinned node_modules/@anthropic-ai/sdk.
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({
  baseURL: process.env.CHATGATE_BASE_URL,
  apiKey: process.env.CHATGATE_API_KEY,
  maxRetries: 0,
});
const model = process.env.CHATGATE_MODEL;
const keys = JSON.parse(process.env.CHATGATE_CASE_KEYS);
const textOf = (message) =>
  message.content.filter((b) => b.type === "text").map((b) => b.text).join("");

for (const key of keys) {
  const messages = [{ role: "user", content: `[case:${key}] answer the case` }];
  const stream = client.messages.stream({ model, max_tokens: 256, messages });
  let streamed = "";
  let extension = null;
  stream.on("text", (text) => { streamed += text; });
  stream.on("streamEvent", (event) => {
    if (event.type === "message_delta") extension = event.chatgate;
  });
  const final = await stream.finalMessage();
  const whole = await client.messages.create({ model, max_tokens: 256, messages });
  console.log(JSON.stringify({
    key, streamed, final: textOf(final), whole: textOf(whole),
    metadata: extension?.response_metadata, warnings: extension?.warnings,
    wholeMetadata: whole.chatgate?.response_metadata, usage: whole.usage,
    stopReasons: [final.stop_reason, whole.stop_reason],
  }));
}

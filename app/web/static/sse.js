// Incremental parser for text/event-stream (the WHATWG rules the gateway's SSE follows):
// feed it decoded text as it arrives, get back complete events. Comments (": ping") are skipped.

const LINE_END = /\r\n|\r(?!$)|\n/g; // a lone trailing \r may still become \r\n

export class SseParser {
  constructor() {
    this.buffer = "";
    this.eventType = "";
    this.data = [];
    this.lastId = null;
  }

  /** Feed a piece of decoded text; returns the events it completed, in order. */
  feed(text) {
    this.buffer += text;
    const events = [];
    let start = 0;
    let match;
    LINE_END.lastIndex = 0;
    while ((match = LINE_END.exec(this.buffer)) !== null) {
      this.line(this.buffer.slice(start, match.index), events);
      start = LINE_END.lastIndex;
    }
    this.buffer = this.buffer.slice(start);
    return events;
  }

  line(line, events) {
    if (line === "") {
      if (this.data.length > 0) {
        events.push({ event: this.eventType || "message", data: this.data.join("\n"), id: this.lastId });
      }
      this.eventType = "";
      this.data = [];
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.eventType = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id") this.lastId = value;
  }
}

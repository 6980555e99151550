"""The turn core: pure (no asyncio, starlette, sqlalchemy or httpx), so it runs and is tested
without a database or a socket. Upstream chunks go in (`inputs`), an `AnswerStream` turns
them into clean deltas, and `finish` makes the stored message and the closing events. The
shell (app/turn/run/answer_run.py) does the I/O around it; adapters render its `events`."""

"""The Anthropic Messages API (`/v1/messages`): one more wire adapter over the call path of
`/v1/chat/completions` (app.turn.run.completion)."""

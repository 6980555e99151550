"""The OpenAI Chat Completions surface: `/v1/chat/completions` and `/v1/models`, in OpenAI's
own wire format and error shape, over the completion service (app.turn.run.completion)."""

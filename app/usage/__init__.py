"""Token usage: estimates from text and prices per model. Pure."""

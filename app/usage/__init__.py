"""Token usage: estimates from text, prices per model, and the figures a turn adds up to. Pure."""

"""What a running answer holds of its process while it runs: its lease of an upstream slot, an
opening place and precedence in its thread, the checkpoints of its partial text, and the
tokens its key's budget lets it spend."""

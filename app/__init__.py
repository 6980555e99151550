"""Chatgate: a streaming chat gateway whose output is marker-safe."""

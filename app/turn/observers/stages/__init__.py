"""A turn's stages besides the main answer: the thread's title and summary, each a side call."""

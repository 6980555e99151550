"""Small pure helpers every domain uses: the clock, text cleaning for storage, the synthetic
flag, user ids. Nothing here does I/O."""

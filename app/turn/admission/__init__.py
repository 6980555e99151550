"""A turn let in, or refused: the limits (rate, budget, streams per user) and the opening of
its rows under them."""

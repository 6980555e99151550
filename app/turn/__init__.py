"""The turn: one chat turn from its request to its stored answer (its endpoints, its
shell, its runs and resume, its lease and slots, its finish, the /v1 adapter) and its rows."""

"""The native chat API's turn: the adapter over the answer run, its event log that readers
and resumes follow, its SSE frames and endpoints, and sharing a run with other processes."""

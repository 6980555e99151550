"""The Responses API's stored side: the threads its responses live in, the items a request
may reference, and a stored response's own routes (input items, delete)."""

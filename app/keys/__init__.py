"""Keys and limits: who is calling (API keys, revocation) and what the limits count
(streams, requests per minute)."""

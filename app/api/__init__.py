"""The HTTP kit every domain's endpoints share: auth, request bodies, JSON errors, SSE frames
and the runtime's access (the route table is app/gateway/routes.py)."""

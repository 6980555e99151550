"""HTTP shell: routes, auth, JSON errors, SSE."""

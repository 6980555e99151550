"""What `scripts/serve` runs: the gateway under uvicorn on loopback."""

from __future__ import annotations

import uvicorn


def main() -> None:
    """Start the gateway."""
    uvicorn.run("app.main:create_app", factory=True, host="127.0.0.1", port=8000)


if __name__ == "__main__":
    main()

"""`python -m app.demo_llm --host 127.0.0.1 --port N [--delay-ms MS] [--think-ms MS]
[--slow-first-s S]`."""

from __future__ import annotations

import argparse

import uvicorn

from app.demo_llm.options import DemoSettings
from app.demo_llm.server import create_demo_app
from app.observe.logging import configure_logging


def main(argv: list[str] | None = None) -> None:
    """Run the demo model server under uvicorn (loopback by default)."""
    parser = argparse.ArgumentParser(prog="python -m app.demo_llm", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--delay-ms", type=float, default=None,
                        help="pause before each delta (env CHATGATE_DEMO_DELAY_MS)")
    parser.add_argument("--think-ms", type=float, default=None,
                        help="pause before each piece of thinking (env CHATGATE_DEMO_THINK_MS)")
    parser.add_argument("--slow-first-s", type=float, default=None,
                        help="first-token pause of [slow-first] (env CHATGATE_DEMO_SLOW_FIRST_S)")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in (("delay_ms", args.delay_ms), ("think_ms", args.think_ms),
                                   ("slow_first_s", args.slow_first_s)) if v is not None}
    configure_logging(args.log_level)
    app = create_demo_app(DemoSettings(**overrides))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level,
                log_config=None)


if __name__ == "__main__":
    main()

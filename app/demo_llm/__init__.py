"""The built-in OpenAI-compatible demo model server and its failure scenarios."""

from app.demo_llm.options import DemoSettings
from app.demo_llm.server import create_demo_app

__all__ = ["DemoSettings", "create_demo_app"]

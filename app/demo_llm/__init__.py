"""The built-in OpenAI-compatible demo model server and its failure scenarios."""

from app.demo_llm.server import create_demo_app
from app.demo_llm.settings import DemoSettings

__all__ = ["DemoSettings", "create_demo_app"]

"""The gateway of tests/turn/openai (keys on, side calls and the rate limit off, the scripted
model server behind it, prices known): the Messages API is one more adapter over its call."""

from tests.turn.openai.conftest import model_server, oa_gateway

__all__ = ["model_server", "oa_gateway"]

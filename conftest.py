"""Root conftest: registers the shared fixture modules so every test directory can use them."""

pytest_plugins = ["tests.support.databases", "tests.support.live"]

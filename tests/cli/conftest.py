"""The `chatgate` command's tests share serve's: a .venv installed from this checkout."""

from tests.scripts.conftest import installed_venv  # noqa: F401 (the fixture, by its name)

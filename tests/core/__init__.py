"""Tests of app/core."""

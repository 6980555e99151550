"""Tests of app/threads."""

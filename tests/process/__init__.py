"""Tests of app/process."""

"""Tests of app/config."""

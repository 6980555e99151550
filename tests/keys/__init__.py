"""Tests of app/keys: keys and limits."""

"""Tests of app/turn/observers."""

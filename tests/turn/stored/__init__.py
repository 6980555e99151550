"""Tests of app/turn/stored."""

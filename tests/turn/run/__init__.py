"""Tests of app/turn/run."""

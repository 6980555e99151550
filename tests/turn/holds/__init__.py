"""Tests of app/turn/holds."""

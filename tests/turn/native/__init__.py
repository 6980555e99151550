"""Tests of app/turn/native."""

"""Tests of app/turn: the turn's shell, its endpoints and its rows."""

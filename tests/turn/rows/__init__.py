"""Tests of app/turn/rows: the turn repository's contract on both databases."""

"""Tests of app/turn/stages."""

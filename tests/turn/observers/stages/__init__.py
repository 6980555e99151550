"""Tests of app/turn/observers/stages."""

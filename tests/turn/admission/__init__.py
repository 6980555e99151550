"""Tests of app/turn/admission."""

"""Tests of app/gateway."""

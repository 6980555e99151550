"""Tests of app/observe."""

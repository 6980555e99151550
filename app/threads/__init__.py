"""Threads: a user's threads and histories as the user sees them, and their live events."""

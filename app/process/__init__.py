"""The gateway process: its heartbeat, the sweep of dead processes' streams, readiness."""

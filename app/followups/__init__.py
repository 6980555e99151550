"""Autonomous follow-ups: after a silence the assistant speaks again, prompted by a synthetic
user message the model sees and the user never does (docs/followups.md).

Pure parts: triggers (types, prompts, reasons), autonomy (settings, cap), recall_query.
Shell parts: scheduler (TurnObserver), worker (claims and runs due follow-ups), recall (memory
retrieval TurnObserver), thread_settings (PATCH service); app.gateway.followups starts them
in a process."""

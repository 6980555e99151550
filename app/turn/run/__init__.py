"""The run of one answer, whatever API asked for it (app.turn.run.answer_run)."""

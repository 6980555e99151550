"""Who watches a turn without steering it: metrics, tracing, the thread's announcer, and the
title and summary stages."""

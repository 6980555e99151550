"""The timings that keep one answer per thread when a process is cut off from the database.

A process that cannot reach the database cannot be told from a dead one: its heartbeat
stops either way, and after `dead_after` any other process sweeps its answers and lets their
threads take a new turn. So a process whose heartbeat has not been renewed for `fence_after`
ends its own answers first (app.process.service), and `dead_after` must leave a margin
after that for the ending to reach its clients (a busy event loop) and for the hosts'
clocks to differ (the sweeper compares the owner's heartbeat with its own clock):

    last renewed heartbeat ... + fence_after: the owner has ended its answers
                               ... + margin
                               ... <= dead_after: the first moment a sweeper may take over

Pure: the settings derive and check the figures; the process service runs them."""

from __future__ import annotations

#: The least margin between the self-fence and the takeover.
MIN_FENCE_MARGIN_S = 0.5
#: The margin as a share of dead_after, when that is larger.
FENCE_MARGIN_SHARE = 0.1


def fence_margin(dead_after_s: float) -> float:
    return max(MIN_FENCE_MARGIN_S, FENCE_MARGIN_SHARE * dead_after_s)


def derived_fence_after(dead_after_s: float) -> float:
    """Half of dead_after: 5 s of the default 10 s, leaving 5 s of margin."""
    return dead_after_s / 2


def fence_problem(*, heartbeat_s: float, fence_after_s: float, dead_after_s: float
                  ) -> str | None:
    """What the fence bound must be instead, or None when the three fit: above the heartbeat
    (a renewal must have a chance), and a margin short of dead_after."""
    margin = fence_margin(dead_after_s)
    if fence_after_s <= heartbeat_s or fence_after_s + margin > dead_after_s:
        return (f"above CHATGATE_HEARTBEAT_S ({heartbeat_s:g}) and at most "
                f"CHATGATE_PROCESS_DEAD_AFTER_S less {margin:g} s "
                f"({dead_after_s - margin:g}): a process cut off from the database must end "
                "its answers before another may take them over")
    return None

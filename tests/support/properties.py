"""The two ways the stream, reasoning and JSON properties run.

`fixed` (the default, every run of the suite): derandomized, so the suite draws the same
inputs each time, a failure is one anybody can run again, and the time it takes is known. It
draws a third of a property's examples: the same inputs run again find nothing new, so past
a regression check more of them only cost the suite time.
`randomized` (CHATGATE_PROPERTIES=randomized; .ci/run runs them so for a time budget, see
scripts/test_properties): fresh inputs on every run, every example a property asks for, so
the properties keep finding what the fixed draw never reaches; a failure prints the blob that
reproduces it (@reproduce_failure).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

RANDOMIZED = os.environ.get("CHATGATE_PROPERTIES", "fixed") == "randomized"
#: The fixed draw takes one example in this many of a property's `max_examples`.
FIXED_SHARE = 3


def property_settings(max_examples: int) -> settings:
    """A property's settings in the mode of this run (`max_examples`: a randomized round's
    draw; the fixed draw is a share of it): no deadline (a loaded machine is slow),
    no example database (nothing carried between runs but the code)."""
    return settings(
        max_examples=max_examples if RANDOMIZED else max(1, max_examples // FIXED_SHARE),
        derandomize=not RANDOMIZED,
        print_blob=RANDOMIZED,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )

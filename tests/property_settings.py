"""The Hypothesis settings every property test of the suite uses, in one place.

The suite's properties draw large outputs over real vocabularies and run on a shared machine, so
they have no deadline and no health checks, and they keep no example database. A run of the usual
size (100 examples or fewer) draws the same cases every time (derandomized: CI and the quick lane
are reproducible); a long run (``make fuzz`` raises the count through the tests' environment
variables) explores.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def property_settings(examples: int) -> settings:
    """Settings for a property test of ``examples`` cases (derandomized up to 100)."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=examples <= 100,
        database=None,
        suppress_health_check=list(HealthCheck),
    )

"""Python's cyclic garbage collector, set for a server that parses on its event loop.

At the interpreter's defaults (a collection of the youngest generation every 700 net new
container objects) a ``ParseBatch`` step of 1,000 sessions runs several collections, and every
few hundred steps one of them is a full one over every live object: measured on 300 such steps
(``BatchProtocol.receive`` in process), 339 collections, 170-200 ms in all, the longest 50-70 ms,
which is the p99 of the steps' latency. At a threshold of 20,000 the same steps ran 5 young
collections, ~38 ms in all, none over 8 ms: the objects of a step are freed by reference counting
before a collection sees them, and fewer survive to be rescanned. Objects that live for the whole
process (the code, the models, their grammars and tokenizers) are frozen once they are loaded:
collections never scan them again, and a forked worker's collector does not touch (and so copy)
the pages it shares with the supervisor.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000
"""Net new container objects between collections of the youngest generation (default 700)."""


def tune() -> None:
    """Set the thresholds (the older generations' keep their defaults)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)


def freeze_loaded() -> None:
    """Collect once, then move everything alive now out of the collector's sight: call it when
    the process has loaded what it keeps for good (models), before sessions exist."""
    gc.collect()
    gc.freeze()

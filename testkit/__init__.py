"""What the tests and the benchmarks share: the server launcher, process and reply helpers, and the
workloads (model outputs and the families' renderers).

A package of its own at the top of the checkout, beside ``tests/`` and ``bench/``, so that neither
imports the other: pytest puts the checkout on ``sys.path`` (``pythonpath`` in pyproject.toml) and
the benchmarks, which run from a checkout as scripts, add it as they add ``server/``. It is not
part of the ``parsetier`` distribution: nothing a user installs depends on it.
"""

"""What the tests and the benchmarks share: the server launcher, process and reply helpers, and the
workloads (model outputs and the families' renderers).

A package of its own inside ``tests/`` (the checkout's top level is fixed): the tests import it as
``testkit`` (pytest puts ``tests/`` on ``sys.path``), and the benchmarks, which run from a checkout
as scripts, import it as the package ``tests.testkit`` with the checkout on ``sys.path``, as they add
``server/``; its modules import each other relatively, so both names work. Nothing in it imports
a test module, and it is not part of the ``parsetier`` distribution: nothing a user installs
depends on it.
"""

"""canitoolcall conformance through the live gRPC service.

``adapter``: the suite's ``Adapter`` (engine ``parsetier``) speaking to a running server;
``run``: the whole suite in both delivery modes, and the rules the project reads it by;
``report``: ``docs/conformance.md`` from a run (``tests/conformance/generate_report.py`` is the command).
"""

"""The session-message protocol, sans-IO: every rule about the messages of a session and of a
stream of sessions, with no gRPC, no asyncio and no engine of its own.

- ``rules``: the rules of a session's messages as tables (order, counting, limits, the plain
  path, the reply), with the theory of operation;
- ``session``: one session's state machine (``SessionProtocol``), which applies them;
- ``batch``: a ``ParseBatch`` stream, a table of sessions keyed by the client, packed items too;
- ``ledger``: a session's counters (client messages, tokens, sequence, digest), in Python or in
  the native core;
- ``resume``: a broken session continued on a new stream, checked by its output digest;
- ``framing``: how a reply is framed on the wire (parts of a large reply, ``ParseOnce``).

The engines (``parsetier.engine``, the native core behind ``parsetier.native``) turn ids into
output; this package decides what a message means for its session and what is answered.
"""

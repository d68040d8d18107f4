"""The sans-IO parse engine: grammar, lexer, JSON scanning, argument writers, state machine.

Nothing here touches a socket, a clock or a tokenizer object; see ``docs/engine.md``.
"""

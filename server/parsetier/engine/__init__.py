"""The reference engine: token ids in, deltas (and wire bytes) out, sans-IO.

Nothing here touches a socket or a clock; see ``docs/engine.md``. It is the specification the
native core (``server/parsetier_core/engine/src/``) is proven equal to, and it is laid out like that
crate: each Rust file's twin sits at the same relative path. The twins (``tests/test_layout.py``
holds this table to both trees):

=========================  ===========================  =====================================
Rust                       Python                       what
=========================  ===========================  =====================================
lib.rs                     __init__.py                  the engine's face
session.rs                 session.py                   one request's parse: ids → deltas
detok.rs                   detokenizer.py               ids → text in sentinel form (the
                                                        Python keeps the longer name)
lexer.rs                   lexer.py                     the incremental literal lexer
machine.rs                 machine.py                   the state machine over the grammar
readers/mod.rs             readers/__init__.py          argument readers (``common.py`` holds
                                                        the shared ``ArgumentReader`` parts)
readers/elements.rs        readers/elements.py          one element per argument
readers/envelope.rs        readers/envelope.py          JSON envelopes carrying the name
readers/gemma.rs           readers/gemma.py             Gemma 4's object notation
readers/json_args.rs       readers/json_args.py         arguments as one JSON value
readers/params.rs          readers/params.py            key/value parameters
readers/python_calls.rs    readers/python_calls.py      pythonic call lists, Python literals
json_scan.rs               json_scan.py                 where a JSON value ends
events.rs                  events.py                    semantic events
assembler.rs               assembler.py                 events → deltas, the final message
call_ids.rs                call_ids.py                  tool call ids derived from the request
digest.rs                  digest.py                    the output digest
grammar.rs                 grammar/__init__.py          the bound grammar (Python also
                                                        validates and binds it: ``schema``,
                                                        ``load``, ``bind``; ``describe.py``
                                                        writes it for the core)
wire/mod.rs                wire/__init__.py             wire dialects (``request.py``: their
                                                        shared values)
wire/chat.rs               wire/chat.py                 OpenAI chat completions
wire/anthropic.rs          wire/anthropic.py            Anthropic Messages
wire/responses.rs          wire/responses.py            OpenAI Responses
parser.rs                  -                            machine + assembler (``session.py``)
pyjson.rs                  -                            Python's ``json`` (``json_bounds.py``)
text.rs                    -                            Python's ``str`` semantics
keyhash.rs                 -                            the packed path's key hash
prefetch.rs                -                            cache hints for the packed path
=========================  ===========================  =====================================

Python only: ``wire/completions.py`` (completion sessions run on this engine),
``wire/errors.py`` (the error that ends a dialect's stream), ``wire/wire_json.py``.
"""

"""Argument styles: how a call's arguments become a stream of JSON text fragments.

* ``ParamWriter`` — XML-style formats write one key and one raw-text value at a time
  (Qwen3-Coder, GLM, MiniMax, DSML). String values stream as JSON string fragments as they are
  generated; other schema types (integer, number, boolean, null, object, array) need the whole value
  to be typed, so they are written once their closing marker arrives.
* ``JsonArgsReader`` — the model writes the arguments as one JSON value (DeepSeek, Kimi, Harmony,
  Mistral v11): it streams through verbatim, from its first bracket to the matching last one.
* ``EnvelopeReader`` — the name travels inside the JSON (Hermes ``{"name": …, "arguments": …}``,
  Llama, Mistral's older list form): the call starts once the name is known and the arguments
  value begins; if the envelope never takes shape the raw text is handed back for passthrough.
* ``ElementArgsReader`` — one element per argument, nested elements for objects and arrays
  (MiniMax-M3's ``]<]minimax[>[<city>Paris]<]minimax[>[</city>``), typed by the tool's schema.
* ``GemmaArgsReader`` — Gemma 4's ``{key:<|"|>text<|"|>,n:1}`` notation, translated to JSON.
* ``PythonCallsReader`` — pythonic call lists (Llama 4), Python literals translated to JSON.

Every reader speaks ``ArgumentReader`` (``common.py``): the machine has it read the state's text
(``read_from``), reads its ``status``, hands it the state's remaining text (``rest``) and asks once,
on leaving, for text to pass through (``unclaimed``). One module per style; this package only
gathers them.
"""

from parsetier.engine.readers.common import ArgumentReader, Emit, json_string_fragment
from parsetier.engine.readers.elements import ElementArgsReader
from parsetier.engine.readers.envelope import EnvelopeReader
from parsetier.engine.readers.gemma import GemmaArgsReader
from parsetier.engine.readers.json_args import JsonArgsReader
from parsetier.engine.readers.params import ParamWriter, schema_types, typed_value
from parsetier.engine.readers.python_calls import PythonCallsReader

__all__ = [
    "ArgumentReader",
    "ElementArgsReader",
    "Emit",
    "EnvelopeReader",
    "GemmaArgsReader",
    "JsonArgsReader",
    "ParamWriter",
    "PythonCallsReader",
    "json_string_fragment",
    "schema_types",
    "typed_value",
]

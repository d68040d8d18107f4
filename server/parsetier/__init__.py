"""parsetier: turn a model's output token ids into reasoning, content and tool calls, streaming.

The sans-IO core lives here (``engine/``: the reference engine; ``formats/``); the gRPC adapter is
``service/``. See ``docs/engine.md`` for the pipeline.
"""

__version__ = "0.1.0"

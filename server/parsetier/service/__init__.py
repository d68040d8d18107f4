"""The gRPC service: a thin shell around the sans-IO session (proto ↔ ``Session``), plus the
server's operations — limits, health, reflection, draining and structured logs.

Nothing here parses: the servicer converts messages, enforces limits and maps errors to status
codes; every decision about the model's output is the session's.
"""

from parsetier.service.limits import Limits
from parsetier.service.server import ServerHandle, build_server, serve

__all__ = ["Limits", "ServerHandle", "build_server", "serve"]

"""Client-side errors. All are ServerError subclasses, so the CLI reports them with their hint; a
lost server is also a ConnectionError and a timeout a TimeoutError (toolkit.errors)."""

from __future__ import annotations

from toolkit.errors import ServerError

STATUS_HINT = "is the server running? check with `sdtk status`"


class ClientError(ServerError):
    """A request the server refused or failed (bad input, unknown model, model error...)."""

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        model: str | None = None,
        protocol: str | None = None,
        status: int | str | None = None,
        hint: str | None = None,
    ):
        self.url = url
        self.model = model
        self.protocol = protocol
        self.status = status
        super().__init__(message, hint=hint)


class ServerUnreachable(ClientError, ConnectionError):
    """Nothing answers at the server's address (connection refused, DNS, no route)."""


class ConnectionLost(ClientError, ConnectionError):
    """The server closed the connection or died while a response was in flight."""


class ResponseTimeout(ClientError, TimeoutError):
    """No (next) response arrived within the client's timeout."""

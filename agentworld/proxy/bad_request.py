"""The proxy's refusal of an agent's request: one exception every check raises.

It sits below everything else in ``proxy/`` (the checks of every wire format,
the body reader, the routes raise it), so it imports nothing of the proxy's.
"""

from __future__ import annotations


class BadRequest(ValueError):
    """The agent's request is malformed; ``param`` names the field (OpenAI's error shape)."""

    def __init__(
        self, message: str, param: str | None = None, status: int = 400, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code  # a machine-readable code, where the protocol has one for the case

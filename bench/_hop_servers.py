"""The two servers `bench/proxy_hop.py` puts beside `aw proxy`: the cheapest vLLM-shaped
upstream, and a bare aiohttp pass-through on uvloop. Each runs in its own process:

    python bench/_hop_servers.py upstream PORT [GAP_MS]
    python bench/_hop_servers.py bare PORT UPSTREAM_URL

The upstream is a raw asyncio protocol that answers every POST with bytes encoded once at
start-up (vLLM's chat shapes with ``token_ids``, ``prompt_token_ids`` and log-probs, unary or
SSE by the body's ``"stream":true``; the SSE all in one write, or, for a body with
``"user":"paced"``, one event a write ``GAP_MS`` apart (2 by default), as an engine sends
tokens): it parses no JSON, so at 32 agents it costs a small
part of what any hop costs, and is never the bottleneck it would be as an aiohttp app.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys

REPLY = "Hello! How can I help you today?"
PROMPT_IDS = list(range(60, 79))


def _logprobs(text: str, start: int) -> dict:
    return {
        "content": [
            {
                "token": ch,
                "logprob": -0.01 * (start + k + 1),
                "bytes": [ord(ch)],
                "top_logprobs": [],
            }
            for k, ch in enumerate(text)
        ]
    }


def unary_body() -> bytes:
    """vLLM's unary chat answer to a call with ``return_token_ids`` and ``logprobs``."""
    choice = {
        "index": 0,
        "finish_reason": "stop",
        "stop_reason": None,
        "message": {"role": "assistant", "content": REPLY, "refusal": None, "reasoning": None},
        "logprobs": _logprobs(REPLY, 0),
        "token_ids": [ord(ch) for ch in REPLY],
    }
    return json.dumps(
        {
            "id": "chatcmpl-hop",
            "object": "chat.completion",
            "created": 1796177037,
            "model": "m",
            "choices": [choice],
            "usage": {"prompt_tokens": 19, "total_tokens": 51, "completion_tokens": len(REPLY)},
            "prompt_logprobs": None,
            "prompt_token_ids": PROMPT_IDS,
        },
        separators=(",", ":"),
    ).encode()


def stream_body() -> bytes:
    """vLLM's SSE chat answer (three tokens an event, token ids on every event)."""
    head = {"id": "chatcmpl-hop", "object": "chat.completion.chunk", "created": 1796177037}
    head["model"] = "m"
    events = [
        {
            **head,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
            ],
            "prompt_token_ids": PROMPT_IDS,
        }
    ]
    for i in range(0, len(REPLY), 3):
        piece = REPLY[i : i + 3]
        choice = {
            "index": 0,
            "finish_reason": None,
            "delta": {"content": piece},
            "logprobs": _logprobs(piece, i),
            "token_ids": [ord(ch) for ch in piece],
        }
        events.append({**head, "choices": [choice]})
    stop = {"index": 0, "finish_reason": "stop", "stop_reason": None, "delta": {}, "token_ids": []}
    events.append({**head, "choices": [stop]})
    usage = {"prompt_tokens": 19, "total_tokens": 51, "completion_tokens": len(REPLY)}
    events.append({**head, "choices": [], "usage": usage})
    lines = [b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in events]
    return b"".join(lines) + b"data: [DONE]\n\n"


def paced_parts() -> list[bytes]:
    """The SSE answer as an engine sends it: its head with the first event, then one event
    a write (``"user":"paced"`` in the request asks for it)."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    events = [e + b"\n\n" for e in stream_body().split(b"\n\n") if e]
    parts = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    parts[0] = head + parts[0]
    parts[-1] += b"0\r\n\r\n"
    return parts


def _answers() -> tuple[bytes, bytes]:
    unary = unary_body()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    sse = stream_body()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(sse), sse)
    stream_head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    return head % len(unary) + unary, stream_head + chunked


class Upstream(asyncio.Protocol):
    """HTTP/1.1 keep-alive: read a request's head and body, answer with pre-encoded bytes."""

    UNARY, STREAM = _answers()
    PACED = paced_parts()
    GAP_S = 0.002  # between a paced stream's events (``upstream PORT GAP_MS``)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buf = bytearray()
        self.need = 0  # the body length of the request whose head is parsed (-1: empty)
        self.queue: collections.deque[bytes] = collections.deque()  # a paced answer's rest
        self.sending = False

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            if not self.need:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buf[:end]).lower()
                at = head.find(b"content-length:")
                stop = head.find(b"\r\n", at)
                length = int(head[at + 15 : stop if stop > 0 else None]) if at >= 0 else 0
                del self.buf[: end + 4]
                self.need = length or -1
            if self.need > 0 and len(self.buf) < self.need:
                return
            body = bytes(self.buf[: max(self.need, 0)])
            del self.buf[: max(self.need, 0)]
            self.need = 0
            stream = b'"stream":true' in body or b'"stream": true' in body
            if stream and b'"user":"paced"' in body:
                self._paced()
                continue
            answer = self.STREAM if stream else self.UNARY
            if self.sending:  # after the paced answer still going out
                self.queue.append(answer)
            else:
                self.transport.write(answer)  # type: ignore[attr-defined]

    def _paced(self) -> None:
        """Queue the paced answer: its parts go out ``GAP_S`` apart, after what is queued."""
        self.queue.extend(self.PACED)
        if not self.sending:
            self._send_next()

    def _send_next(self) -> None:
        if not self.queue or self.transport.is_closing():  # type: ignore[attr-defined]
            self.sending = False
            self.queue.clear()
            return
        self.sending = True
        self.transport.write(self.queue.popleft())  # type: ignore[attr-defined]
        asyncio.get_running_loop().call_later(self.GAP_S, self._send_next)


def serve_upstream(port: int) -> None:
    import uvloop

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Upstream, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


def serve_bare(port: int, upstream: str) -> None:
    """The bare hop: read the body, forward it, stream the answer back; record nothing."""
    import aiohttp
    import uvloop
    from aiohttp import web

    session: aiohttp.ClientSession | None = None

    async def handle(request: web.Request) -> web.StreamResponse:
        assert session is not None
        data = await request.read()
        headers = {"Content-Type": "application/json"}
        async with session.post(upstream + request.path, data=data, headers=headers) as r:
            try:
                out = web.StreamResponse(status=r.status)
                out.content_type = r.content_type
                await out.prepare(request)
                async for chunk in r.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
            except BaseException:
                # An agent gone mid-stream (wrk's runs end with streams in flight): the
                # upstream connection must not go back to the pool with the rest unread
                # (``release``, what leaving ``async with`` does, would put it there).
                r.close()
                raise
            return out

    async def main() -> None:
        nonlocal session
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
        )
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    uvloop.run(main())


if __name__ == "__main__":
    if sys.argv[1] == "upstream":
        if len(sys.argv) > 3:
            Upstream.GAP_S = float(sys.argv[3]) / 1000
        serve_upstream(int(sys.argv[2]))
    else:
        serve_bare(int(sys.argv[2]), sys.argv[3])

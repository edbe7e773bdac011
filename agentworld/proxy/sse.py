"""Server-sent events: split an upstream byte stream into events, and assemble streamed chunks.

The assembler turns OpenAI/vLLM ``chat.completion.chunk`` (or ``text_completion``)
chunks back into the body a non-streamed call would have returned, so one
recorder serves both modes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from msgspec import UNSET

from agentworld import raw_ids
from agentworld.proxy.adapters.openai_records import LogprobValues, logprob_values
from agentworld.raw_ids import RawIds

MAX_EVENT_BYTES = 16 * 1024 * 1024

# One byte to look for, as an int. ``needle in data`` with a bytes needle first tries
# the needle as an int inside CPython and raises and clears a TypeError (~2,000
# instructions); an int needle is a plain scan, and ``data.find(needle)`` for a longer
# one. On every event of every stream, that was 3% of a streamed call.
LF, CR = ord("\n"), ord("\r")

_LOGPROB = itemgetter("logprob")  # a log-prob entry's value, as logprob_values reads it


class SSEError(ValueError):
    """The upstream stream is not valid SSE (or an event is too large)."""


# What reading a parsed event or body of the wrong shape raises (a list where an object
# belongs, a number for a name): the upstream's answer is malformed, a 502.
MALFORMED = (TypeError, AttributeError, KeyError, ValueError)


class EventSplitter:
    """Incremental splitter: complete raw events (without the blank line) as bytes arrive.

    Each byte is searched once: an event that spans many reads (a first chunk
    carrying tens of thousands of prompt ids) waits as a list of pieces and is
    joined once, when its blank line arrives. A stream that uses CRs (``\\r\\n``
    line ends, which may straddle two reads) is normalised on the whole pending
    event instead.
    """

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._parts: list[bytes] = []  # the incomplete event's bytes so far
        self._size = 0
        self._cr = False  # the stream has used a CR: normalise from here on
        self.max_event_bytes = max_event_bytes

    def split(self, data: bytes) -> list[bytes]:
        """Feed bytes; get the events they complete (one ``bytes.split``: the hot path)."""
        parts = self._parts
        if not parts and not self._cr and CR not in data:  # the usual read: whole events
            events = data.split(b"\n\n")
            rest = events.pop()
            if rest:
                self._parts = [rest]
                self._size = len(rest)
                self._check(self._size)
            return events
        if self._cr or CR in data:
            self._cr = True
            # A CR at the end stays in the rest, so the next read completes its CRLF.
            events = (b"".join(parts) + data).replace(b"\r\n", b"\n").split(b"\n\n")
        elif data[:1] == b"\n" and parts[-1][-1:] == b"\n":  # the blank line straddles
            parts[-1] = parts[-1][:-1]
            events = [b"".join(parts), *data[1:].split(b"\n\n")]
        else:
            k = data.find(b"\n\n")
            if k < 0:
                parts.append(data)
                self._size += len(data)
                self._check(self._size)
                return []
            parts.append(data[:k])
            events = [b"".join(parts), *data[k + 2 :].split(b"\n\n")]
        rest = events.pop()
        self._parts = [rest] if rest else []
        self._size = len(rest)
        self._check(self._size)
        return events

    def _check(self, size: int) -> None:
        if size > self.max_event_bytes:
            raise SSEError(f"an SSE event is over {self.max_event_bytes} bytes")

    @property
    def pending(self) -> bytes:
        return b"".join(self._parts)


def event_data(event: bytes) -> bytes | None:
    """The joined ``data:`` payload of one event, or None for comments and other fields."""
    if event.startswith(b"data: ") and LF not in event:
        return event[6:]  # the usual one-line event
    parts = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            parts.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(parts) if parts else None


def encode_event(obj: Any) -> bytes:
    return b"data: " + raw_ids.dumps(obj) + b"\n\n"


@dataclass
class _Choice:
    index: int
    role: str = "assistant"
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    stop_reason: Any = None
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | RawIds | None = None
    # chat: each logprobs.content entry's ``logprob`` (None for an entry without one, or
    # not an object): all a record keeps of them, and what every reading of a chunk makes
    logprobs: LogprobValues | None = None
    token_logprobs: list[Any] | None = None  # completions: logprobs.token_logprobs
    saw_content: bool = False


def _content(ch: _Choice) -> str | None:
    """A streamed choice's message content, as vLLM's unary answer has it: null when no
    text came, or only the "" its first chunk carries, before tool calls or reasoning
    (vLLM's parsers make an empty rest null); "" for an answer of nothing else."""
    if not ch.saw_content:
        return None
    text = "".join(ch.content)
    return None if not text and (ch.tool_calls or ch.reasoning) else text


class StreamAssembler:
    """Accumulates parsed chunks; ``result()`` is the equivalent non-streamed body."""

    def __init__(self, *, chat: bool) -> None:
        self.chat = chat
        self.choices: dict[int, _Choice] = {}
        self.top: dict[str, Any] = {}
        self.usage: dict[str, Any] | None = None
        self.prompt_token_ids: list[int] | RawIds | None = None
        self.error: dict[str, Any] | None = None
        self.done = False
        self.chunks = 0

    def add(self, chunk: Any) -> None:
        """Take one parsed ``data:`` object (this runs once per streamed token: keep it lean).

        A chat choice is read inline, here: a Python call per choice costs about as much
        as the rest of the choice's reading.
        """
        if not isinstance(chunk, dict):
            return
        choices = chunk.get("choices")
        if choices is None and "error" in chunk:
            err = chunk["error"]
            self.error = err if isinstance(err, dict) else {"message": str(err)}
            return
        self.chunks += 1
        if not self.top:
            self.top = {k: chunk[k] for k in ("id", "model", "created") if chunk.get(k) is not None}
        usage = chunk.get("usage")
        if usage is not None and isinstance(usage, dict):
            self.usage = usage
        ids = chunk.get("prompt_token_ids")
        if ids is not None and isinstance(ids, list | RawIds):
            self.prompt_token_ids = ids
        fingerprint = chunk.get("system_fingerprint")
        if fingerprint is not None:
            self.top["system_fingerprint"] = fingerprint
        if not choices:
            return
        if not self.chat:
            for c in choices:
                if isinstance(c, dict):
                    self._add_text(c)
            return
        for c in choices:
            if c.__class__ is not dict and not isinstance(c, dict):
                continue
            i = c.get("index", 0)
            ch = self.choices.get(i)
            if ch is None:
                if not isinstance(i, int):
                    continue
                ch = self.choices[i] = _Choice(i)
            delta = c.get("delta")
            if delta:
                content = delta.get("content")
                if content.__class__ is str:
                    ch.content.append(content)
                    ch.saw_content = True
                if len(delta) > 1 or content is None:
                    self._add_delta_rest(ch, delta)
            lp = c.get("logprobs")
            if lp and isinstance(lp.get("content"), list):
                values = ch.logprobs
                if values is None:
                    values = ch.logprobs = LogprobValues()
                n = len(values)
                try:  # logprob_values, inline: one C-speed pass for the usual entries
                    values += map(_LOGPROB, lp["content"])
                except (KeyError, TypeError):  # an entry without one, or not an object
                    values[n:] = logprob_values(lp["content"])
            ids = c.get("token_ids")
            if ids.__class__ is list:
                if ch.token_ids is None:
                    ch.token_ids = []
                ch.token_ids += ids
            reason = c.get("finish_reason")
            if reason is not None and isinstance(reason, str):
                ch.finish_reason = reason
            stop = c.get("stop_reason")
            if stop is not None:
                ch.stop_reason = stop

    def add_typed(self, chunk: Any) -> None:
        """``add`` for a chat chunk read into structs (``adapters/openai_chunks``: attributes,
        ``UNSET`` for an absent field, no ``error``): the same state from the same event, step
        for step in the same order (so a malformed tool call stops both at the same point)."""
        self.chunks += 1
        if not self.top:
            top = {}
            for key, v in (("id", chunk.id), ("model", chunk.model), ("created", chunk.created)):
                if v is not None and v is not UNSET:
                    top[key] = v
            self.top = top
        usage = chunk.usage
        if usage.__class__ is dict:
            self.usage = usage
        ids = chunk.prompt_token_ids
        if ids.__class__ is list:
            self.prompt_token_ids = ids
        fingerprint = chunk.system_fingerprint
        if fingerprint is not None and fingerprint is not UNSET:
            self.top["system_fingerprint"] = fingerprint
        for c in chunk.choices or ():
            i = c.index
            if i is UNSET:
                i = 0
            ch = self.choices.get(i)
            if ch is None:
                ch = self.choices[i] = _Choice(i)
            delta = c.delta
            if delta is not None and delta is not UNSET:
                content = delta.content
                if content.__class__ is str:
                    ch.content.append(content)
                    ch.saw_content = True
                role = delta.role
                if role and role.__class__ is str:
                    ch.role = role
                r = delta.reasoning
                if r is None or r is UNSET:
                    r = delta.reasoning_content
                if r.__class__ is str:
                    ch.reasoning.append(r)
                calls = delta.tool_calls
                if calls is not UNSET:
                    for tc in calls or ():
                        self._add_tool_call(ch, tc)
            lp = c.logprobs
            if lp is not None and lp is not UNSET and lp.content.__class__ is list:
                if ch.logprobs is None:
                    ch.logprobs = LogprobValues()
                ch.logprobs += [e.logprob for e in lp.content]
            ids = c.token_ids
            if ids.__class__ is list:
                if ch.token_ids is None:
                    ch.token_ids = []
                ch.token_ids += ids
            reason = c.finish_reason
            if reason.__class__ is str:
                ch.finish_reason = reason
            stop = c.stop_reason
            if stop is not None and stop is not UNSET:
                ch.stop_reason = stop

    def _add_text(self, c: dict[str, Any]) -> None:
        """A completions choice (``text``, ``logprobs.token_logprobs``, prompt ids)."""
        i = c.get("index", 0)
        ch = self.choices.get(i)
        if ch is None:
            if not isinstance(i, int):
                return
            ch = self.choices[i] = _Choice(i)
        text = c.get("text")
        if text.__class__ is str:
            ch.text.append(text)
        lp = c.get("logprobs")
        if lp and isinstance(lp.get("token_logprobs"), list):
            if ch.token_logprobs is None:
                ch.token_logprobs = []
            ch.token_logprobs.extend(lp["token_logprobs"])
        if isinstance(c.get("prompt_token_ids"), list | RawIds):
            ch.prompt_token_ids = c["prompt_token_ids"]
        ids = c.get("token_ids")
        if ids.__class__ is list:
            if ch.token_ids is None:
                ch.token_ids = []
            ch.token_ids.extend(ids)
        if c.get("finish_reason") is not None and isinstance(c["finish_reason"], str):
            ch.finish_reason = c["finish_reason"]
        if c.get("stop_reason") is not None:
            ch.stop_reason = c["stop_reason"]

    def _add_delta_rest(self, ch: _Choice, delta: dict[str, Any]) -> None:
        """The less frequent parts of a chat delta: role, reasoning, tool calls."""
        if delta.get("role") and isinstance(delta["role"], str):
            ch.role = delta["role"]
        r = delta.get("reasoning")
        if r is None:
            r = delta.get("reasoning_content")
        if isinstance(r, str):
            ch.reasoning.append(r)
        for tc in delta.get("tool_calls") or ():
            self._add_tool_call(ch, tc)

    @staticmethod
    def _add_tool_call(ch: _Choice, tc: Any) -> None:
        if not isinstance(tc, dict):
            return
        k = tc.get("index", len(ch.tool_calls))
        if k.__class__ is not int:
            raise ValueError(f"a tool call's index is {k!r}, not an integer")
        cur = ch.tool_calls.get(k)
        if cur is None:
            cur = ch.tool_calls[k] = {"id": None, "type": "function", "name": "", "arguments": []}
        if tc.get("id"):
            cur["id"] = tc["id"]
        fn = tc.get("function") or {}
        if fn.get("name") and isinstance(fn["name"], str):
            cur["name"] += fn["name"]
        if isinstance(fn.get("arguments"), str):
            cur["arguments"].append(fn["arguments"])

    def result(self) -> dict[str, Any]:
        """The body a non-streamed call would have returned (as far as the chunks tell)."""
        choices = []
        for i in sorted(self.choices):
            ch = self.choices[i]
            out: dict[str, Any] = {"index": i, "finish_reason": ch.finish_reason}
            if self.chat:
                msg: dict[str, Any] = {"role": ch.role, "content": _content(ch)}
                if ch.reasoning:
                    msg["reasoning"] = "".join(ch.reasoning)
                if ch.tool_calls:
                    msg["tool_calls"] = [
                        {
                            "id": t["id"],
                            "type": "function",
                            "function": {"name": t["name"], "arguments": "".join(t["arguments"])},
                        }
                        for _, t in sorted(ch.tool_calls.items())
                    ]
                out["message"] = msg
                out["logprobs"] = {"content": ch.logprobs} if ch.logprobs is not None else None
            else:
                out["text"] = "".join(ch.text)
                out["logprobs"] = (
                    {"token_logprobs": ch.token_logprobs} if ch.token_logprobs is not None else None
                )
                if ch.prompt_token_ids is not None:
                    out["prompt_token_ids"] = ch.prompt_token_ids
            if ch.stop_reason is not None:
                out["stop_reason"] = ch.stop_reason
            if ch.token_ids is not None:
                out["token_ids"] = ch.token_ids
            choices.append(out)
        body: dict[str, Any] = {**self.top, "choices": choices, "usage": self.usage}
        if self.prompt_token_ids is not None:
            body["prompt_token_ids"] = self.prompt_token_ids
        return body

"""OpenAI Responses streams: chat-completions chunks translated to Responses events, and Responses
events assembled back into the Response they describe (for recording pass-through streams).

Every event carries a ``sequence_number``. The grammar: ``response.created``,
``response.in_progress``, then per output item ``response.output_item.added``,
its parts and deltas, ``response.output_item.done``, and finally
``response.completed`` (or ``response.incomplete``) holding the whole Response.

A call to a custom tool streams from the model as JSON arguments
(``{"input": "..."}``): ``InputDecoder`` decodes the string as it arrives, so
its ``response.custom_tool_call_input.delta`` events follow the model's tokens
(an agent with an idle timeout sees a long patch being written). Arguments of
another shape are sent whole when the call ends; ``.done`` always holds the
input as the finished arguments give it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

import orjson

from agentworld.proxy.translate.chat_form import Piece, first_choice_pieces, short_id, sse
from agentworld.proxy.translate.responses import called, called_names, custom_input, items
from agentworld.proxy.translate.responses_answer import (
    call_item_for,
    message_item,
    reasoning_item,
    search_call_item,
    skeleton,
    status_of,
    stream_error,
    usage_of,
)

_OPENING = re.compile(r'\s*\{\s*"input"\s*:\s*"')
_OPENING_TEXT = '{"input":"'
_HEX = frozenset("0123456789abcdefABCDEF")


class InputDecoder:
    """The text of ``{"input": "..."}`` decoded piece by piece as the arguments arrive.

    ``feed`` returns the newly decoded text: never half an escape, never half a
    surrogate pair. Arguments that do not open that way (or hold an escape that
    does not decode) stop it: ``ok`` turns false and it returns nothing more.
    """

    def __init__(self) -> None:
        self.raw = ""
        self.ok = True
        self.text = ""  # decoded so far
        self._start: int | None = None  # index of the value's first character
        self._done = 0  # raw index up to which ``text`` is decoded
        self._scan = 0  # raw index up to which the closing quote was looked for
        self._end: int | None = None  # index of the closing quote, once seen

    def feed(self, piece: str) -> str:
        self.raw += piece
        if not self.ok or self._end is not None:
            return ""
        if self._start is None:
            m = _OPENING.match(self.raw)
            if m is None:
                squeezed = "".join(self.raw.split())
                if not _OPENING_TEXT.startswith(squeezed):
                    self.ok = False
                return ""
            self._start = self._scan = self._done = m.end()
        limit = self._scan_for_end()
        safe = _safe_end(self.raw, self._done, limit)
        if safe <= self._done:
            return ""
        try:
            new = orjson.loads('"' + self.raw[self._done : safe] + '"')
        except orjson.JSONDecodeError:
            self.ok = False
            return ""
        self._done = safe
        self.text += new
        return new

    def _scan_for_end(self) -> int:
        """Where the decodable part ends: the closing quote, or the end of what came."""
        i, raw = self._scan, self.raw
        while i < len(raw):
            c = raw[i]
            if c == "\\":
                if i + 1 >= len(raw):
                    break  # the escaped character has not come yet
                i += 2
                continue
            if c == '"':
                self._end = i
                self._scan = i
                return i
            i += 1
        self._scan = i
        return len(raw)


def _safe_end(raw: str, start: int, limit: int) -> int:
    """The last index <= ``limit`` that splits no escape and no ``\\uD8xx\\uDCxx`` pair."""
    end = limit
    while (back := raw.rfind("\\", start, end)) >= 0:
        run = back  # the backslashes in a row ending at ``back``: an even run is complete
        while run - 1 >= start and raw[run - 1] == "\\":
            run -= 1
        if (back - run) % 2 == 1:
            return end
        if back + 1 >= end:
            end = back  # a backslash whose escaped character has not come
            continue
        if raw[back + 1] != "u":
            return end  # a two-character escape, whole
        hexes = raw[back + 2 : back + 6]
        if back + 6 > end or not _HEX.issuperset(hexes):
            end = back  # its four hex digits have not all come
            continue
        if 0xD800 <= int(hexes, 16) <= 0xDBFF and back + 6 == end:
            end = back  # a high surrogate whose low half has not come
            continue
        return end
    return end


class ChatToResponses:
    """Feed parsed ``chat.completion.chunk`` objects; get Responses SSE events as bytes."""

    def __init__(
        self, body: dict[str, Any], response_id: str, history: list[dict[str, Any]] = ()
    ) -> None:
        self.body = body
        self.response_id = response_id
        self.seq = 0
        self.response: dict[str, Any] | None = None
        self.output: list[dict[str, Any]] = []  # items, open or done, by output_index
        self.open: int | None = None  # output_index of the item receiving deltas
        # "reasoning" | "message" | "function_call" | "custom_tool_call"
        self.kind: str | None = None
        self.calls: dict[int, int] = {}  # chat tool-call index -> output_index
        # custom, namespaced and tool-search tools' calls (history: what a tool search loaded)
        self.names = called_names(body, [*history, *items(body)])
        self.search_args: dict[int, str] = {}  # output_index -> a tool search's arguments so far
        self.custom_calls: dict[int, InputDecoder] = {}  # output_index -> its arguments so far
        self.finish_reason: Any = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return sse(kind, data)

    def _start(self, chunk: dict[str, Any]) -> list[bytes]:
        model = chunk.get("model") if isinstance(chunk.get("model"), str) else None
        created = chunk.get("created") if isinstance(chunk.get("created"), int | float) else None
        self.response = skeleton(
            self.body,
            self.response_id,
            model or self.body.get("model") or "",
            created or time.time(),
        )
        # Each event is serialised as it is made: what it shows needs no copy.
        return [
            self._event("response.created", response=self.response),
            self._event("response.in_progress", response=self.response),
        ]

    def _add(self, kind: str, item: dict[str, Any]) -> list[bytes]:
        out = self._close()
        self.output.append(item)
        self.open = len(self.output) - 1
        self.kind = kind
        out.append(self._event("response.output_item.added", output_index=self.open, item=item))
        if kind in ("message", "reasoning"):
            part = (
                {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                if kind == "message"
                else {"type": "reasoning_text", "text": ""}
            )
            item["content"] = [dict(part)]
            out.append(self._part_event("response.content_part.added", part))
        return out

    def _part_event(self, kind: str, part: dict[str, Any]) -> bytes:
        item = self.output[self.open or 0]
        return self._event(
            kind, item_id=item["id"], output_index=self.open, content_index=0, part=dict(part)
        )

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        i, item, out = self.open, self.output[self.open], []
        if self.kind == "message":
            part = item["content"][0]
            out.append(
                self._event(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=i,
                    content_index=0,
                    text=part["text"],
                    logprobs=[],
                )
            )
            out.append(self._part_event("response.content_part.done", part))
        elif self.kind == "reasoning":
            part = item["content"][0]
            out.append(
                self._event(
                    "response.reasoning_text.done",
                    item_id=item["id"],
                    output_index=i,
                    content_index=0,
                    text=part["text"],
                )
            )
            out.append(self._part_event("response.content_part.done", part))
        elif self.kind == "function_call":
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=i,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
        elif self.kind == "tool_search_call":
            item["arguments"] = search_call_item("", "", self.search_args[i])["arguments"]
        elif self.kind == "custom_tool_call":
            decoder = self.custom_calls[i]
            item["input"] = custom_input(decoder.raw)
            ids = {"item_id": item["id"], "output_index": i}
            rest = item["input"][len(decoder.text) :]
            if rest and item["input"].startswith(decoder.text):  # what was not streamed yet
                out.append(self._event("response.custom_tool_call_input.delta", **ids, delta=rest))
            out.append(
                self._event("response.custom_tool_call_input.done", **ids, input=item["input"])
            )
        if self.kind != "custom_tool_call":  # the one item type without a status
            # An answer cut off (max_output_tokens, content filter) leaves its last item so.
            item["status"] = status_of(self.finish_reason)[0]
        out.append(self._event("response.output_item.done", output_index=i, item=item))
        self.open = self.kind = None
        return out

    def feed(self, chunk: Any) -> list[bytes]:
        """Events for one chunk (choice 0 only: Responses has no ``n``)."""
        if not isinstance(chunk, dict):
            return []
        return self.feed_pieces(chunk, first_choice_pieces(chunk))

    def feed_pieces(self, chunk: Any, pieces: Iterable[Piece]) -> list[bytes]:
        """Events for a chunk's choice-0 ``pieces`` (``chunk``: read with ``get`` when it
        is the first)."""
        out = [] if self.response is not None else self._start(chunk)
        for piece in pieces:
            if piece.reasoning:
                if self.kind != "reasoning":
                    out += self._add("reasoning", reasoning_item(short_id("rs"), "", "in_progress"))
                out.append(self._text_delta("response.reasoning_text.delta", piece.reasoning))
            if piece.text:
                if self.kind != "message":
                    out += self._add("message", message_item(short_id("msg"), None, "in_progress"))
                out.append(self._text_delta("response.output_text.delta", piece.text, logprobs=[]))
            for tc in piece.tool_calls:
                out += self._tool_call(tc)
            if piece.finish_reason is not None:
                self.finish_reason = piece.finish_reason
        return out

    def _text_delta(self, kind: str, text: str, **extra: Any) -> bytes:
        item = self.output[self.open or 0]
        item["content"][0]["text"] += text
        return self._event(
            kind, item_id=item["id"], output_index=self.open, content_index=0, delta=text, **extra
        )

    def _tool_call(self, tc: Any) -> list[bytes]:
        if not isinstance(tc, dict):
            return []
        k = tc.get("index", len(self.calls))
        fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
        out: list[bytes] = []
        if k not in self.calls:
            name, call_id = str(fn.get("name") or ""), tc.get("id") or short_id("call")
            called_as = called(self.names, name)
            item = call_item_for(called_as, call_id, "")
            if called_as[0] == "custom_tool_call":
                out += self._add("custom_tool_call", item)
                self.custom_calls[self.open or 0] = InputDecoder()
            elif called_as[0] == "tool_search_call":  # its arguments (an object) come at done
                item["status"] = "in_progress"
                out += self._add("tool_search_call", item)
                self.search_args[self.open or 0] = ""
            else:
                item["status"] = "in_progress"
                out += self._add("function_call", item)
            self.calls[k] = self.open or 0
        i = self.calls[k]
        args = fn.get("arguments")
        if not isinstance(args, str) or not args:
            return out
        if i in self.search_args:
            self.search_args[i] += args
            return out
        decoder = self.custom_calls.get(i)
        if decoder is not None:  # a custom call: its input, decoded as far as it came
            kind, field, delta = (
                "response.custom_tool_call_input.delta",
                "input",
                decoder.feed(args),
            )
        else:
            kind, field, delta = "response.function_call_arguments.delta", "arguments", args
        if delta and i == self.open:  # a late piece of an earlier call shows in its done event
            self.output[i][field] += delta
            out.append(self._event(kind, item_id=self.output[i]["id"], output_index=i, delta=delta))
        elif decoder is None:
            self.output[i]["arguments"] += args
        return out

    def finish(self, prompt: int, completion: int, cached: int) -> list[bytes]:
        """The closing events, given the final token counts."""
        out = [] if self.response is not None else self._start({})
        out += self._close()
        assert self.response is not None
        final = self.final(prompt, completion, cached)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        out.append(self._event(kind, response=final))
        return out

    def final(self, prompt: int, completion: int, cached: int) -> dict[str, Any]:
        """The whole Response as it stands (also what the pass-through record would hold)."""
        resp = dict(self.response or skeleton(self.body, self.response_id, "", time.time()))
        resp["status"], resp["incomplete_details"] = status_of(self.finish_reason)
        resp["output"] = [dict(item) for item in self.output]  # its own items: set below
        for i, decoder in self.custom_calls.items():  # with any late piece of its arguments
            resp["output"][i]["input"] = custom_input(decoder.raw)
        for i, raw in self.search_args.items():
            resp["output"][i]["arguments"] = search_call_item("", "", raw)["arguments"]
        resp["usage"] = usage_of(prompt, completion, cached)
        return resp

    def call_ids(self) -> list[str]:
        """The ``call_id`` the agent was given for each of the answer's tool calls, in order."""
        return [self.output[self.calls[k]]["call_id"] for k in sorted(self.calls)]

    def fail(self, status: int, message: str) -> bytes:
        """What ends the stream when the call failed, as OpenAI ends one: an ``error`` event
        and ``response.failed`` (after ``response.created``, which a client needs first,
        when the failure came before anything else did)."""
        out = [] if self.response is not None else self._start({})
        error = stream_error(status, message)
        out.append(self._event("error", **error))
        resp = dict(self.response or {})
        resp["status"] = "failed"
        resp["error"] = {"code": error["code"], "message": message}
        resp["output"] = [dict(item) for item in self.output]
        out.append(self._event("response.failed", response=resp))
        return b"".join(out)


class ResponsesAssembler:
    """Rebuilds the Response from a Responses event stream (pass-through recording)."""

    _LIFECYCLE = frozenset(
        {
            "response.created",
            "response.in_progress",
            "response.queued",
            "response.completed",
            "response.incomplete",
            "response.failed",
        }
    )
    _FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

    def __init__(self) -> None:
        self.response: dict[str, Any] | None = None
        self.items: dict[int, dict[str, Any]] = {}
        self.error: dict[str, Any] | None = None
        self.done = False

    def add(self, event: Any) -> None:
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        i = event.get("output_index")
        if kind in self._LIFECYCLE and isinstance(event.get("response"), dict):
            self.response = event["response"]
            self.done = self.done or kind in self._FINAL
        elif kind in ("response.output_item.added", "response.output_item.done") and isinstance(
            i, int
        ):
            if isinstance(event.get("item"), dict):
                self.items[i] = event["item"]  # parsed for this event alone: the deltas go in it
        elif kind == "response.output_text.delta" and i in self.items:
            parts = self.items[i].setdefault("content", [])
            ci = event.get("content_index", 0)
            while len(parts) <= ci:
                parts.append({"type": "output_text", "text": ""})
            parts[ci]["text"] = parts[ci].get("text", "") + str(event.get("delta", ""))
        elif kind == "response.function_call_arguments.delta" and i in self.items:
            item = self.items[i]
            item["arguments"] = item.get("arguments", "") + str(event.get("delta", ""))
        elif kind == "response.custom_tool_call_input.delta" and i in self.items:
            item = self.items[i]
            item["input"] = item.get("input", "") + str(event.get("delta", ""))
        elif kind == "error":
            self.error = {"message": str(event.get("message", "")), "code": event.get("code")}

    def result(self) -> dict[str, Any] | None:
        """The Response so far: the final one if it came, else what the items say."""
        if self.response is None:
            return None
        resp = dict(self.response)
        if not resp.get("output") and self.items:
            resp["output"] = [self.items[i] for i in sorted(self.items)]
        return resp

"""Chat rendering and parsing: messages -> prompt token ids, generated text -> OpenAI message."""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

# ChatML with Hermes-style tools, the format Qwen2.5 and NousResearch Hermes use and that
# vLLM's `--tool-call-parser hermes` reads. Used by the tiny test model, and as the fallback
# for models whose own template ignores `tools` (SmolLM2's does), so tools always reach the model.
HERMES_CHATML_TEMPLATE = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0]['role'] == 'system' %}"
    "<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' and loop.first %}"
    "{% elif message['role'] == 'assistant' %}"
    "<|im_start|>assistant\n{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% if message.get('tool_calls') %}{% for tc in message['tool_calls'] %}"
    "{% set f = tc['function'] if tc.get('function') else tc %}"
    '\n<tool_call>\n{"name": "{{ f[\'name\'] }}", "arguments": '
    "{% if f['arguments'] is string %}{{ f['arguments'] }}{% else %}{{ f['arguments'] | tojson }}"
    "{% endif %}}\n</tool_call>{% endfor %}{% endif %}<|im_end|>\n"
    "{% elif message['role'] == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def _text_content(content: Any) -> Any:
    """Flatten OpenAI content-part lists to plain text: templates expect strings."""
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return content


def render_prompt(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """Token ids of the prompt the model sees for these messages (and tools)."""
    msgs = [{**m, "content": _text_content(m.get("content"))} for m in messages]
    for m in msgs:
        # Templates index arguments as a mapping; OpenAI sends them as a JSON string.
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function", {})
            if isinstance(fn.get("arguments"), str):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except ValueError:
                    pass
    template = getattr(tokenizer, "chat_template", None)
    if tools and (not template or "tools" not in template):
        template = HERMES_CHATML_TEMPLATE
    out = tokenizer.apply_chat_template(
        msgs,
        tools=tools or None,
        chat_template=template,
        add_generation_prompt=add_generation_prompt,
        tokenize=True,
        return_dict=True,
        **(chat_template_kwargs or {}),
    )
    return list(out["input_ids"])


@dataclass
class ParsedMessage:
    """An assistant turn split into OpenAI's parts."""

    content: str | None
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def new_tool_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def parse_assistant_text(text: str, tools_enabled: bool = True) -> ParsedMessage:
    """Split generated text into reasoning, content and Hermes tool calls.

    Like vLLM's hermes parser, content is the text before the first tool call, unstripped,
    and a `<tool_call>` block that is not a JSON object with a string `name` is left in
    content. Streaming relies on this: what it sent before a marker is a prefix of content.
    """
    reasoning = None
    start = text.find("<think>")
    if start >= 0:
        end = text.find("</think>", start)
        if end >= 0:
            reasoning = text[start + len("<think>") : end]
            text = text[:start] + text[end + len("</think>") :]
        else:
            # Stopped inside the reasoning block (max_tokens): all of it is reasoning.
            reasoning, text = text[start + len("<think>") :], text[:start]

    calls: list[dict[str, Any]] = []
    first = None
    if tools_enabled and "<tool_call>" in text:
        for m in _TOOL_CALL_RE.finditer(text):
            call = _to_openai_call(m.group(1))
            if call is not None:
                calls.append(call)
                first = m.start() if first is None else first
    if first is not None:
        text = text[:first]
    return ParsedMessage(
        content=text if text.strip() else None, reasoning=reasoning, tool_calls=calls
    )


def _to_openai_call(body: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return {
        "id": new_tool_call_id(),
        "type": "function",
        "function": {
            "name": obj["name"],
            "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
        },
    }

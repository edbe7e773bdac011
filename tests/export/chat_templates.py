"""Tool-call parts of two published chat templates, as exports are rendered by them.

Both render a call's arguments with ``| tojson`` whatever their type, as the
transformers docs ask (``docs/source/en/chat_extras.md``: "the OpenAI API
uses a JSON string as its ``tool_calls`` format ... Transformers ... expects
a dict"), so a string there comes out quoted a second time. Abridged to the
message loop, written after:
- Qwen/Qwen2.5-7B-Instruct ``tokenizer_config.json`` ``chat_template``
  (assistant ``tool_calls`` and ``tool`` results);
- meta-llama/Llama-3.1-8B-Instruct ``tokenizer_config.json``
  ``chat_template`` (it tests ``'tool_calls' in message``, so a null
  ``tool_calls`` on a plain message fails ``| length``).
"""

from __future__ import annotations

QWEN25_TOOL_LOOP = """
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system") or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

LLAMA31_TOOL_LOOP = """
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {{- '{"name": "' + tool_call.name + '", "parameters": ' }}{{- tool_call.arguments | tojson }}{{- '}<|eot_id|>' }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""

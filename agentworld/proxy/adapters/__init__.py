"""One adapter per wire format, all behind the one interface in ``base.py``.

``openai.py``: chat completions (the identity adapter) and legacy completions;
``translated.py``: Anthropic Messages and OpenAI Responses, translated to a chat
upstream or passed through to one that speaks them.
"""

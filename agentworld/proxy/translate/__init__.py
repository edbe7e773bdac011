"""Anthropic Messages and OpenAI Responses, translated to and from chat completions.

Pure functions and small state machines over JSON objects and SSE events: no
aiohttp, no pool. The adapters (``proxy/adapters/``) call them.
"""

"""Model serving: an embedded transformers engine or a managed vLLM, behind one OpenAI-compatible API."""

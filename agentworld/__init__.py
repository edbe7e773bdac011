"""AgentWorld: a data factory for training LLM agents."""

__version__ = "0.1.0"

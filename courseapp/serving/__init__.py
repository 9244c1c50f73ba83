"""The OpenAI-compatible API and /metrics (issue #10): the engine as the server of §6's lab."""

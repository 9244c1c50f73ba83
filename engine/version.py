"""The server's version, as vLLM's /version reports its own."""
__version__ = "1.0.0"

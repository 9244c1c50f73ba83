"""A paged continuous-batching inference engine on PyTorch + transformers (imports nothing from Django)."""

"""The KV pool tensors: one K and one V tensor per layer, preallocated, addressed by slot.

Each layer's K and V live in one tensor, `kv[layer]` [2 · kv_heads, slots, head_dim] — the K
heads, then the V heads — with slot = block_id * block_size + offset (head-major: see
engine/attention.py for why; one tensor so a layer's write and each group's read are one call
each). `k[layer]` and `v[layer]` are views of its two halves. A CPU pool of the same layout holds
swapped-out blocks.
"""
from dataclasses import dataclass

import torch


def text_config(config):
    """The language model's part of a transformers config (a multimodal one nests it)."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


@dataclass(frozen=True, slots=True)
class KVShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int

    @classmethod
    def from_config(cls, config) -> "KVShape":
        text = text_config(config)
        heads = text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        return cls(text.num_hidden_layers, getattr(text, "num_key_value_heads", None) or heads, head_dim)

    def bytes_per_block(self, block_size: int, dtype: torch.dtype) -> int:
        return 2 * self.num_layers * block_size * self.num_kv_heads * self.head_dim * dtype.itemsize


class KVCache:
    def __init__(self, shape: KVShape, num_blocks: int, block_size: int, dtype, device, num_cpu_blocks: int = 0):
        self.shape = shape
        self.num_blocks = num_blocks
        self.block_size = block_size
        hkv = shape.num_kv_heads
        slots = (2 * hkv, num_blocks * block_size, shape.head_dim)
        self.kv = [torch.zeros(slots, dtype=dtype, device=device) for _ in range(shape.num_layers)]
        self.k = [layer[:hkv] for layer in self.kv]
        self.v = [layer[hkv:] for layer in self.kv]
        cpu_slots = (shape.num_kv_heads, num_cpu_blocks * block_size, shape.head_dim)
        pin = torch.device(device).type == "cuda"
        self.cpu_k = [torch.zeros(cpu_slots, dtype=dtype, pin_memory=pin) for _ in range(shape.num_layers)] if num_cpu_blocks else []
        self.cpu_v = [torch.zeros(cpu_slots, dtype=dtype, pin_memory=pin) for _ in range(shape.num_layers)] if num_cpu_blocks else []

    def _slots(self, block_ids: list[int], device) -> torch.Tensor:
        base = torch.tensor(block_ids, dtype=torch.long, device=device) * self.block_size
        return (base[:, None] + torch.arange(self.block_size, device=device)).reshape(-1)

    def swap_out(self, gpu_blocks: list[int], cpu_blocks: list[int]) -> None:
        src = self._slots(gpu_blocks, self.k[0].device)
        dst = self._slots(cpu_blocks, "cpu")
        for layer in range(self.shape.num_layers):
            self.cpu_k[layer][:, dst] = self.k[layer][:, src].to("cpu")
            self.cpu_v[layer][:, dst] = self.v[layer][:, src].to("cpu")

    def swap_in(self, cpu_blocks: list[int], gpu_blocks: list[int]) -> None:
        src = self._slots(cpu_blocks, "cpu")
        dst = self._slots(gpu_blocks, self.k[0].device)
        for layer in range(self.shape.num_layers):
            self.k[layer][:, dst] = self.cpu_k[layer][:, src].to(self.k[layer].device, non_blocking=True)
            self.v[layer][:, dst] = self.cpu_v[layer][:, src].to(self.v[layer].device, non_blocking=True)

"""Engine configuration, validated before any work starts."""
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = str(Path(__file__).resolve().parent / "models" / "munuibot-tiny")


def cxx_compiler() -> str | None:
    """The C++ compiler the decode kernel and the compiled path are built with, if any."""
    return shutil.which("g++") or shutil.which("c++")


class ConfigError(ValueError):
    """A configuration the engine cannot run with; the message names the limit."""


@dataclass(slots=True)
class EngineConfig:
    model: str | None = None  # a local Hugging Face checkpoint folder; default: ENGINE_MODEL or munuibot-tiny
    block_size: int = 16  # tokens per KV block
    num_blocks: int | None = None  # KV blocks in the pool; None → sized from kv_cache_memory_bytes
    kv_cache_memory_bytes: int = 64 * 2**20  # used only when num_blocks is None
    max_num_seqs: int = 32  # requests in one step at most
    max_num_batched_tokens: int = 512  # tokens in one step at most (the token budget)
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    enable_prefix_caching: bool = True
    preemption_mode: str = "recompute"  # or "swap"
    num_cpu_blocks: int | None = None  # swap space in blocks; default: num_blocks
    scheduling: str = "continuous"  # or "static"
    # "paged": blocks as tokens need them; "max_len": each request reserves max_model_len up
    # front (the naive scheme of the lesson's §1.2, kept for side-by-side comparison)
    kv_reservation: str = "paged"
    # Free blocks a new admission must leave per running request, so the running can grow into
    # their next blocks instead of being preempted and recomputed a step later. Not in vLLM V1
    # (it admits while the prompt fits and preempts when a running request cannot grow); V0
    # kept a watermark of 1 % of the blocks. The default 0 is V1's behaviour (bench.throughput
    # measures 0.5 beside it).
    admission_headroom: float = 0.0
    # torch.compile (inductor) of each decoder layer around the paged attention, in a copy of the
    # weights of its own; the first steps of each new shape compile (tens of seconds in all).
    # Inductor builds C++ (on a GPU, Triton's launchers): it needs a C/C++ compiler (Debian: g++).
    compile: bool = False
    # Decode attention: "cpu_paged" reads each request's blocks in place with the engine's C++
    # kernel (engine/cpu_attention.py; CPU, float32; needs a C++ compiler, built once, ~1 s);
    # "torch_sdpa" gathers the blocks and calls SDPA; "auto" takes the kernel where it builds.
    attention_backend: str = "auto"
    device: str | None = None  # None → cuda if available, else cpu
    dtype: str | None = None  # None → bfloat16 on cuda, float32 on cpu
    seed: int = 0
    model_name: str | None = None  # label for metrics; default: the folder's name

    def __post_init__(self):
        if self.model is None:
            self.model = os.environ.get("ENGINE_MODEL") or DEFAULT_MODEL
        if self.model_name is None:
            self.model_name = Path(self.model).name
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.admission_headroom <= 4:
            raise ConfigError(f"admission_headroom must lie between 0 and 4 blocks per running request, got {self.admission_headroom}")
        if self.num_blocks is not None and self.num_blocks <= 0:
            raise ConfigError(f"num_blocks must be positive, got {self.num_blocks}")
        if self.preemption_mode not in ("recompute", "swap"):
            raise ConfigError(f"preemption_mode must be 'recompute' or 'swap', got {self.preemption_mode!r}")
        if self.scheduling not in ("continuous", "static"):
            raise ConfigError(f"scheduling must be 'continuous' or 'static', got {self.scheduling!r}")
        if self.kv_reservation not in ("paged", "max_len"):
            raise ConfigError(f"kv_reservation must be 'paged' or 'max_len', got {self.kv_reservation!r}")
        if self.attention_backend not in ("auto", "cpu_paged", "torch_sdpa"):
            raise ConfigError(f"attention_backend must be 'auto', 'cpu_paged' or 'torch_sdpa', got {self.attention_backend!r}")
        if self.attention_backend == "cpu_paged" and not cxx_compiler():
            raise ConfigError("attention_backend='cpu_paged' needs a C++ compiler (g++ or c++ on the PATH) to build "
                              "the engine's decode-attention kernel (Debian: apt-get install g++)")
        if self.compile and not cxx_compiler():
            raise ConfigError("compile=True needs a C++ compiler (g++ or c++ on the PATH): torch.compile's "
                              "inductor builds the compiled layers with it (Debian: apt-get install g++)")
        if not Path(self.model).is_dir():
            raise ConfigError(f"model folder not found: {self.model} (set EngineConfig.model or ENGINE_MODEL)")
        if not (Path(self.model) / "config.json").exists():
            raise ConfigError(f"{self.model} has no config.json: not a Hugging Face checkpoint folder")

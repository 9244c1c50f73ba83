"""The CPU paged decode-attention kernel (engine/csrc/paged_decode_attention.cpp): built with the
machine's C++ compiler on first use, cached, and called through ctypes.

A decode reads its request's K/V blocks in place, with an online softmax over the blocks —
PagedAttention's own way — instead of gathering every request's context into a padded batch
for SDPA. Building takes about a second (plain C++, no torch headers); the library is cached
under ENGINE_KERNEL_DIR (default ~/.cache/munuibot-engine), named by a hash of the source, the
flags, the compiler and the CPU, so a changed source or another machine builds its own.
"""
import ctypes
import hashlib
import os
import platform
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

from engine.config import cxx_compiler

SOURCE = Path(__file__).resolve().parent / "csrc" / "paged_decode_attention.cpp"
# -march=native: the library is built for, and cached per, the CPU it runs on.
# -fno-math-errno: no errno to keep for the math calls left (the softmax's exp is the kernel's own).
FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-shared", "-fPIC"]
MAX_GROUP, MAX_BLOCK, MAX_DIM = 16, 128, 256  # what the kernel holds (see its constants)


class KernelUnavailable(RuntimeError):
    """The kernel cannot be built or loaded here; the message says why."""


def _cpu_id() -> str:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = ""
    return platform.machine() + flags


def _cache_dir() -> Path:
    if os.environ.get("ENGINE_KERNEL_DIR"):
        return Path(os.environ["ENGINE_KERNEL_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "munuibot-engine"


def build() -> Path:
    """The built library's path, building it if this source, compiler and CPU have none yet."""
    cxx = cxx_compiler()
    if cxx is None:
        raise KernelUnavailable("no C++ compiler (g++ or c++) on the PATH")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), " ".join(FLAGS), version, _cpu_id()]).encode()).hexdigest()[:16]
    target = _cache_dir() / f"paged_decode_attention-{key}.so"
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Build beside the target and rename: processes building at once each finish whole.
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    except OSError as exc:
        raise KernelUnavailable(f"cannot write the kernel's cache {target.parent} (set ENGINE_KERNEL_DIR): {exc}") from exc
    os.close(fd)
    try:
        done = subprocess.run([cxx, *FLAGS, str(SOURCE), "-o", tmp], capture_output=True, text=True)
        if done.returncode != 0:
            raise KernelUnavailable(f"{cxx} failed to build {SOURCE.name}: {done.stderr.strip()[-2000:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


_lock = threading.Lock()
_kernel = None


def load():
    """The kernel's entry point (built and loaded once per process); KernelUnavailable if not."""
    global _kernel
    with _lock:
        if _kernel is None:
            torch.get_num_threads()  # torch's OpenMP runtime is loaded first: the kernel shares it
            try:
                lib = ctypes.CDLL(str(build()))
            except OSError as exc:
                raise KernelUnavailable(f"the built kernel does not load: {exc}") from exc
            fn = lib.paged_decode_attention
            p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
            fn.argtypes = [p, i64, i64, p, p, p, i64, p, i64, p, i32, i32, i32, i32, i32, ctypes.c_float, i32]
            fn.restype = i32
            _kernel = fn
        return _kernel


def usable(device: torch.device, dtype: torch.dtype, num_heads: int, num_kv_heads: int, head_dim: int,
           block_size: int) -> bool:
    """Whether the kernel covers this model and pool at all (CPU, float32, sizes it holds)."""
    return (torch.device(device).type == "cpu" and dtype == torch.float32 and num_heads // num_kv_heads <= MAX_GROUP
            and block_size <= MAX_BLOCK and head_dim <= MAX_DIM)


def decode_attention(fn, q: torch.Tensor, out: torch.Tensor, tokens: torch.Tensor, pool: torch.Tensor,
                     table: torch.Tensor, positions: torch.Tensor, block_size: int, scale: float,
                     window: int | None) -> None:
    """out[tokens[r]] = attention of q[tokens[r]] over request r's cached keys 0 … positions[r].

    q [T, H, D] (a token's heads D apart, rows any stride), out [T, H, D] contiguous, pool
    [2 · Hkv, slots, D] contiguous, table [R, blocks] and tokens/positions [R] contiguous int64."""
    hkv2, slots, d = pool.shape
    h = q.shape[1]
    assert q.stride(2) == 1 and out.is_contiguous() and pool.is_contiguous() and table.is_contiguous()
    rc = fn(q.data_ptr(), q.stride(0), q.stride(1), out.data_ptr(), tokens.data_ptr(), pool.data_ptr(), slots,
            table.data_ptr(), table.stride(0), positions.data_ptr(), tokens.shape[0], h, hkv2 // 2, d, block_size,
            scale, window or 0)
    if rc != 0:
        raise KernelUnavailable("sizes beyond the kernel's limits")

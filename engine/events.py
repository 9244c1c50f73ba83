"""What one step did, as plain data (dataclasses → JSON), so a browser can draw the true pool
and a finished run can be replayed from its trace."""
import json
from dataclasses import asdict, dataclass, field


@dataclass(slots=True)
class ScheduledItem:
    request_id: str
    prefill_tokens: int  # prompt (or recomputed) tokens in this step
    decode_tokens: int
    num_computed_tokens: int  # after the step
    num_tokens: int


@dataclass(slots=True)
class BlockState:
    block_id: int
    ref_cnt: int
    filled: int  # slots holding a token
    cached: bool  # registered in the prefix cache (kept after its owners leave, until evicted)
    owners: list[str]


@dataclass(slots=True)
class StepEvent:
    step: int
    time: float  # seconds since the engine started
    duration_ms: float
    num_blocks: int
    block_size: int
    scheduled: list[ScheduledItem] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)
    finished: list[dict] = field(default_factory=list)  # {request_id, reason}
    preempted: list[dict] = field(default_factory=list)  # {request_id, mode}
    swapped_in: list[str] = field(default_factory=list)
    allocated: list[dict] = field(default_factory=list)  # {request_id, block_ids}
    freed: list[dict] = field(default_factory=list)
    prefix_hits: list[dict] = field(default_factory=list)  # {request_id, block_ids, tokens}
    new_tokens: dict[str, int] = field(default_factory=dict)  # request id → token sampled this step
    blocks: list[BlockState] = field(default_factory=list)  # every block that is not plainly free
    block_tables: dict[str, list[int]] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    swapped: list[str] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))


def replay(trace: list[dict]):
    """Walk a recorded trace step by step (the demo's replay uses this order and shape)."""
    for event in sorted(trace, key=lambda e: e["step"]):
        yield event

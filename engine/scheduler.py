"""Which requests run this step, and with how many tokens (vLLM v1's idea: no phases).

Each request's num_computed_tokens catches up to its token count under a per-step token
budget, so prompt chunks and single-token decodes share a step. Running requests are served
first (in admission order); when the pool runs out, the most recently admitted one is
preempted. New requests are admitted FIFO while seats, budget and blocks last.
"""
import math
import time
from collections import deque
from dataclasses import dataclass, field

from engine.block_pool import BlockPool, hash_block
from engine.request import Request, Status


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[tuple[Request, int]] = field(default_factory=list)  # (request, new tokens this step)
    admitted: list[Request] = field(default_factory=list)
    preempted: list[tuple[Request, str]] = field(default_factory=list)  # (request, "recompute" | "swap")
    swapped_in: list[Request] = field(default_factory=list)
    allocated: list[tuple[str, list[int]]] = field(default_factory=list)
    freed: list[tuple[str, list[int]]] = field(default_factory=list)
    prefix_hits: list[tuple[str, list[int], int]] = field(default_factory=list)  # (request, blocks, tokens)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)


class CpuBlocks:
    """Swap space: a free list of CPU block ids."""

    def __init__(self, num_blocks: int):
        self.free = deque(range(num_blocks))

    def allocate(self, n: int) -> list[int] | None:
        if n > len(self.free):
            return None
        return [self.free.popleft() for _ in range(n)]

    def release(self, ids: list[int]) -> None:
        self.free.extend(ids)


class Scheduler:
    def __init__(self, config, pool: BlockPool, kv, cpu_blocks: CpuBlocks | None, max_tokens_per_request: int):
        self.config = config
        self.block_size = config.block_size
        self.pool = pool
        self.kv = kv
        self.cpu_blocks = cpu_blocks
        self.max_tokens_per_request = max_tokens_per_request  # min(max_model_len, whole pool)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the last one is the next victim
        self.swapped: deque[Request] = deque()
        self.static_batch: set[str] = set()  # static mode: the batch that must finish first
        self.num_preemptions = 0
        self.recomputed_tokens = 0  # computed, then thrown away by a recompute preemption
        self.prefix_queries = 0  # tokens looked up
        self.prefix_hits = 0  # tokens found
        self._admissions = 0

    # --- queue changes -------------------------------------------------------------------------
    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def finish(self, req: Request, status: Status) -> list[int]:
        """Take a request out of every queue and give its blocks back at once."""
        req.status = status
        for queue in (self.running, self.waiting, self.swapped):
            if req in queue:
                queue.remove(req)
        freed = list(req.block_ids)
        self.pool.free(req.block_ids, req.request_id)
        req.block_ids = []
        if req.cpu_block_ids:  # only a swapped-out request holds any (and only with swap space)
            self.cpu_blocks.release(req.cpu_block_ids)
            req.cpu_block_ids = []
        self.static_batch.discard(req.request_id)
        return freed

    # --- the step ------------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens

        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if not self._make_room(req, req.num_computed_tokens + n, out):
                break  # req itself was preempted, and every request after it before
            out.scheduled.append((req, n))
            budget -= n
            i += 1

        if out.preempted:  # the pool is tight: admit nothing new this step
            return out

        # No seat check: a swapped request held a seat when it ran, and nobody is admitted while
        # any is swapped out, so running + swapped never exceeds max_num_seqs.
        while self.swapped and budget > 0:
            if not self._swap_in(self.swapped[0], out):
                break
            req = self.running[-1]
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if not self._grow(req, req.num_computed_tokens + n, out):
                return out  # back, but the rest of its prompt chunk does not fit: the pool is tight
            out.scheduled.append((req, n))
            budget -= n

        if self.swapped:  # swapped requests go before new ones
            return out
        static = self.config.scheduling == "static"
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            if static and self.static_batch and req.request_id not in self.static_batch:
                break  # static batching: the batch runs until every member finishes
            if budget <= 0 and not static:
                break
            n = self._admit(req, budget, out)
            if n is None:
                break
            budget -= n
        if static and not self.static_batch:
            self.static_batch = {r.request_id for r in self.running}
        return out

    # --- helpers -------------------------------------------------------------------------------
    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _grow(self, req: Request, num_tokens: int, out: SchedulerOutput) -> bool:
        """Make sure the request has blocks for num_tokens; a new block only when the last is full."""
        need = self._blocks_for(num_tokens) - len(req.block_ids)
        if need <= 0:
            return True
        if need > self.pool.num_free_blocks:
            return False
        ids = self.pool.allocate(need, req.request_id)
        req.block_ids.extend(ids)
        out.allocated.append((req.request_id, ids))
        return True

    def _make_room(self, req: Request, num_tokens: int, out: SchedulerOutput) -> bool:
        """Grow req to num_tokens, preempting the newest admission until it fits; False if req
        itself had to go."""
        while not self._grow(req, num_tokens, out):
            victim = self.running[-1]
            self._preempt(victim, out)
            if victim is req:
                return False
        return True

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        self.running.remove(req)
        self.num_preemptions += 1
        req.num_preemptions += 1
        mode = self.config.preemption_mode
        cpu_ids = self.cpu_blocks.allocate(len(req.block_ids)) if mode == "swap" and self.cpu_blocks else None
        if mode == "swap" and cpu_ids is None:
            mode = "recompute"  # no swap space left: fall back, as vLLM does
        if mode == "swap":
            self.kv.swap_out(req.block_ids, cpu_ids)
            req.cpu_block_ids = cpu_ids
            req.status = Status.SWAPPED
            self.swapped.append(req)
        else:
            self.recomputed_tokens += req.num_computed_tokens  # to be computed again (less any prefix hits)
            req.num_computed_tokens = 0
            req.num_hashed_blocks = 0
            req.status = Status.WAITING
            self.waiting.appendleft(req)
        out.freed.append((req.request_id, list(req.block_ids)))
        self.pool.free(req.block_ids, req.request_id)
        req.block_ids = []
        # Like vLLM V1's _preempt_request, nothing is logged: the counter num_preemptions (the
        # metric vllm:num_preemptions_total) is the signal. V0 printed a warning here.
        out.preempted.append((req, mode))

    def _swap_in(self, req: Request, out: SchedulerOutput) -> bool:
        need = len(req.cpu_block_ids)
        if need + 1 > self.pool.num_free_blocks:  # room for its blocks and one to grow into
            return False
        ids = self.pool.allocate(need, req.request_id)
        self.kv.swap_in(req.cpu_block_ids, ids)
        self.cpu_blocks.release(req.cpu_block_ids)
        req.cpu_block_ids = []
        req.block_ids = ids
        for block_id, filled in zip(ids, self._fills(req)):
            self.pool.blocks[block_id].num_tokens = filled
        # The copies are plain blocks now; their prefix hashes stay with the originals.
        req.num_hashed_blocks = req.num_computed_tokens // self.block_size
        self.swapped.popleft()
        req.status = Status.RUNNING
        req.admitted_seq = self._next_admission()
        self.running.append(req)
        out.swapped_in.append(req)
        out.allocated.append((req.request_id, ids))
        return True

    def _admit(self, req: Request, budget: int, out: SchedulerOutput) -> int | None:
        """Admit the first waiting request; returns its tokens this step, or None if it can't fit."""
        # A waiting request has nothing computed (new, or preempted to recompute).
        self._hash_prompt(req)
        # The last token is always recomputed: its logits give the next token.
        usable = (req.num_tokens - 1) // self.block_size
        # Prompt logprobs need every prompt position's logits: no cached blocks (as in vLLM).
        hits = [] if req.prompt_logprobs_pending else self.pool.lookup(req.block_hashes[:usable])
        hit_tokens = len(hits) * self.block_size
        n = max(0, min(req.num_tokens - hit_tokens, budget))
        # Static batching admits a whole batch at once, beyond this step's token budget: each
        # member gets blocks for its whole prompt now so the batch is known to fit.
        covered = req.num_tokens if self.config.scheduling == "static" else hit_tokens + n
        if self.config.kv_reservation == "max_len":  # the naive scheme: the whole max length now
            covered = max(covered, self.max_tokens_per_request)
        need = self._blocks_for(covered) - len(hits)
        evictable_hits = sum(1 for b in hits if self.pool.blocks[b].ref_cnt == 0)
        if need + self._headroom() > self.pool.num_free_blocks - evictable_hits:
            return None
        if self.config.enable_prefix_caching:
            self.prefix_queries += req.num_tokens
            self.prefix_hits += hit_tokens
        self.pool.touch(hits, req.request_id)
        new = self.pool.allocate(need, req.request_id)
        req.block_ids = hits + new
        req.num_computed_tokens = hit_tokens
        req.num_hashed_blocks = len(hits)
        if req.num_preemptions == 0:
            req.num_cached_tokens = hit_tokens
        self.waiting.popleft()
        req.status = Status.RUNNING
        if req.first_scheduled_time is None:
            req.first_scheduled_time = time.monotonic()
        req.admitted_seq = self._next_admission()
        self.running.append(req)
        out.admitted.append(req)
        if hits:
            out.prefix_hits.append((req.request_id, hits, hit_tokens))
        if new:
            out.allocated.append((req.request_id, new))
        if n:
            out.scheduled.append((req, n))
        return n

    def _headroom(self) -> int:
        """Blocks a new admission must leave free for the running requests to grow into (none
        for static batching, whose batch is admitted whole, and none with nothing running)."""
        if self.config.scheduling == "static" or not self.running:
            return 0
        return math.ceil(self.config.admission_headroom * len(self.running))

    def _next_admission(self) -> int:
        self._admissions += 1
        return self._admissions

    def _hash_prompt(self, req: Request) -> None:
        tokens = req.all_token_ids
        full = len(tokens) // self.block_size
        parent = req.block_hashes[-1] if req.block_hashes else None
        for i in range(len(req.block_hashes), full):
            parent = hash_block(parent, tokens[i * self.block_size : (i + 1) * self.block_size])
            req.block_hashes.append(parent)

    def _fills(self, req: Request) -> list[int]:
        return [min(self.block_size, req.num_computed_tokens - i * self.block_size) for i in range(len(req.block_ids))]

    def on_computed(self, req: Request, n: int) -> None:
        """After a step: advance the request, record block fill, register newly full blocks."""
        req.num_computed_tokens += n
        first = max(0, (req.num_computed_tokens - n) // self.block_size)
        for i in range(first, len(req.block_ids)):
            self.pool.blocks[req.block_ids[i]].num_tokens = max(0, min(self.block_size, req.num_computed_tokens - i * self.block_size))
        full = req.num_computed_tokens // self.block_size
        if full > req.num_hashed_blocks and self.config.enable_prefix_caching:
            self._hash_prompt(req)
            for i in range(req.num_hashed_blocks, min(full, len(req.block_hashes))):
                self.pool.register(req.block_ids[i], req.block_hashes[i])
            req.num_hashed_blocks = full

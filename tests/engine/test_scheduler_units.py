"""The scheduler on its own, step by step, with no model: what each step schedules, admits,
preempts and swaps, and the bookkeeping the lesson's numbers come from (§3–§5)."""
from collections import deque

import pytest
import torch

from engine.block_pool import BlockPool
from engine.config import EngineConfig
from engine.kv_cache import KVCache, KVShape
from engine.request import Request, Status
from engine.sampling import SamplingParams
from engine.scheduler import CpuBlocks, Scheduler

BS = 4  # tokens per block


def scheduler(path, *, blocks=16, seats=4, budget=64, cpu_blocks=0, **config) -> Scheduler:
    cfg = EngineConfig(model=path, block_size=BS, num_blocks=blocks, max_num_seqs=seats,
                       max_num_batched_tokens=budget, **config)
    kv = KVCache(KVShape(1, 1, 2), blocks, BS, torch.float32, "cpu", cpu_blocks)
    return Scheduler(cfg, BlockPool(blocks, cfg.enable_prefix_caching), kv,
                     CpuBlocks(cpu_blocks) if cpu_blocks else None, max_tokens_per_request=blocks * BS)


def request(rid: str, tokens) -> Request:
    ids = list(range(1, tokens + 1)) if isinstance(tokens, int) else list(tokens)
    return Request(rid, ids, SamplingParams(max_tokens=100))


def step(s: Scheduler):
    """One engine step without the model: schedule, compute, and a new token for every request
    that caught up (what LLMEngine._postprocess does)."""
    out = s.schedule()
    for req, n in out.scheduled:
        s.on_computed(req, n)
        if req.num_computed_tokens == req.num_tokens:
            req.output_token_ids.append(99)
    return out


def steps_until(s: Scheduler, done, limit: int = 60):
    """Step until done(last step's output) holds; a scheduler that never gets there fails the
    test instead of hanging it. Returns that step's output."""
    for _ in range(limit):
        out = step(s)
        if done(out):
            return out
    pytest.fail(f"not within {limit} steps")


def scheduled(out) -> list[tuple[str, int]]:
    return [(r.request_id, n) for r, n in out.scheduled]


def test_running_requests_go_first_and_the_token_budget_splits_each_step(tiny_llama):
    s = scheduler(tiny_llama, budget=6)
    a, b = request("a", 10), request("b", range(101, 111))
    s.add(a)
    s.add(b)
    first = step(s)
    assert scheduled(first) == [("a", 6)] and first.admitted == [a], "the budget is gone: b waits"
    assert scheduled(step(s)) == [("a", 4), ("b", 2)], "a's last prompt tokens first, then b's first chunk"
    assert scheduled(step(s)) == [("a", 1), ("b", 5)], "a decodes one token, b takes the rest of the budget"
    assert scheduled(step(s)) == [("a", 1), ("b", 3)]
    assert s.waiting == deque() and s.running == [a, b]


def test_block_fill_and_prefix_registration_follow_the_computed_tokens(tiny_llama):
    s = scheduler(tiny_llama, budget=6)
    a = request("a", 10)
    s.add(a)
    step(s)  # 6 tokens: one full block and one with 2 slots filled
    assert [s.pool.blocks[b].num_tokens for b in a.block_ids] == [4, 2]
    assert a.num_hashed_blocks == 1 and len(s.pool.cached) == 1
    step(s)  # 10 tokens
    assert [s.pool.blocks[b].num_tokens for b in a.block_ids] == [4, 4, 2]
    assert a.num_hashed_blocks == 2 and set(s.pool.cached.values()) == set(a.block_ids[:2])


def test_a_new_block_only_when_the_last_one_is_full(tiny_llama):
    s = scheduler(tiny_llama)
    a = request("a", 5)
    s.add(a)
    assert step(s).allocated == [("a", a.block_ids)] and len(a.block_ids) == 2  # 5 tokens: 4 + 1
    for _ in range(3):  # tokens 6, 7, 8 fit the second block
        assert step(s).allocated == []
    grown = step(s)  # token 9 needs a third block
    assert grown.allocated == [("a", [a.block_ids[2]])] and len(a.block_ids) == 3


def test_a_prefix_hit_shares_full_blocks_counts_its_tokens_and_recomputes_the_rest(tiny_llama):
    s = scheduler(tiny_llama)
    system = list(range(1, 9))  # two full blocks
    a, b = request("a", system + [50]), request("b", system + [60])
    s.add(a)
    step(s)
    s.add(b)
    out = step(s)
    assert out.prefix_hits == [("b", a.block_ids[:2], 8)]
    assert b.block_ids[:2] == a.block_ids[:2] and b.block_ids[2] != a.block_ids[2]
    assert [s.pool.blocks[i].ref_cnt for i in b.block_ids] == [2, 2, 1]
    assert ("b", 1) in scheduled(out), "only the token after the shared prefix is computed"
    assert (b.num_computed_tokens, b.num_cached_tokens, b.num_hashed_blocks) == (9, 8, 2)
    assert (s.prefix_queries, s.prefix_hits) == (18, 8), "queries count every prompt token, hits the shared ones"
    s.add(request("c", system + [70]))
    step(s)
    assert (s.prefix_queries, s.prefix_hits) == (27, 16), "and add up over requests"


def test_blocks_filled_by_generated_tokens_chain_onto_the_prompts_hashes(tiny_llama):
    """A's second block fills with tokens it generated; its hash chains onto the first block's,
    so a later prompt that repeats a's prompt and answer finds both blocks."""
    s = scheduler(tiny_llama)
    a = request("a", 5)  # one full block at admission
    s.add(a)
    steps_until(s, lambda out: a.num_computed_tokens >= 8)  # the second block is full of its own tokens
    b = request("b", a.all_token_ids[:8] + [77])
    s.add(b)
    out = step(s)
    assert out.prefix_hits == [("b", a.block_ids[:2], 8)]


def test_without_prefix_caching_nothing_is_looked_up_or_counted(tiny_llama):
    s = scheduler(tiny_llama, enable_prefix_caching=False)
    a, b = request("a", 9), request("b", 9)
    s.add(a)
    step(s)
    s.add(b)
    out = step(s)
    assert out.prefix_hits == [] and set(a.block_ids).isdisjoint(b.block_ids)
    assert (s.prefix_queries, s.prefix_hits, len(s.pool.cached)) == (0, 0, 0)


def test_cached_blocks_that_a_hit_reuses_are_not_counted_as_free_room(tiny_llama):
    """Two cached blocks sit in the free queue; a request that hits them cannot also count them
    as room for its new blocks (it would run out half-way through allocating)."""
    for blocks, admitted in ((4, False), (5, True)):
        s = scheduler(tiny_llama, blocks=blocks)
        a = request("a", 9)
        s.add(a)
        step(s)
        s.finish(a, Status.FINISHED_STOPPED)  # its two full blocks stay cached, unowned
        b = request("b", list(range(1, 9)) + list(range(70, 79)))  # the same 8 + 9 more: 5 blocks
        s.add(b)
        out = step(s)
        assert (b in s.running) is admitted, blocks
        assert out.admitted == ([b] if admitted else []) and (b in s.waiting) is not admitted


def test_a_step_that_preempts_admits_nobody_and_the_victim_waits_first_in_line(tiny_llama):
    s = scheduler(tiny_llama, blocks=4)
    a, b = request("a", 7), request("b", 7)
    s.add(a)
    s.add(b)
    step(s)  # both prompts: all four blocks
    step(s)  # 8 tokens each: still two blocks each
    c = request("c", 1)
    s.add(c)
    out = step(s)  # a needs a third block: b, the latest admitted, gives its blocks back
    assert out.preempted == [(b, "recompute")] and out.freed == [("b", out.freed[0][1])]
    assert out.admitted == [], "a step that preempted admits no one, though a seat and a block are free"
    assert list(s.waiting) == [b, c] and s.running == [a]
    assert (b.status, b.num_computed_tokens, b.block_ids, b.num_hashed_blocks) == (Status.WAITING, 0, [], 0)
    assert (s.num_preemptions, b.num_preemptions, a.num_preemptions) == (1, 1, 0)


def test_a_recompute_preemption_counts_the_tokens_it_throws_away(tiny_llama):
    s = scheduler(tiny_llama, blocks=4, enable_prefix_caching=False)
    a, b = request("a", 7), request("b", 7)
    s.add(a)
    s.add(b)
    step(s)
    step(s)  # b has computed its 7 prompt tokens and its first output token
    step(s)  # a grows into a third block: b goes, and everything it computed with it
    assert s.recomputed_tokens == 8


def test_admission_headroom_keeps_blocks_for_the_running_to_grow_into(tiny_llama):
    """With headroom, the second request waits instead of taking the last blocks: the first
    grows into them, and nobody is preempted to recompute. Without it (V1), b is admitted and
    then preempted when a needs a third block."""
    for headroom, preemptions in ((0.0, 1), (1.0, 0)):
        s = scheduler(tiny_llama, blocks=4, admission_headroom=headroom, enable_prefix_caching=False)
        a, b = request("a", 7), request("b", 7)
        s.add(a)
        s.add(b)
        step(s)  # a's prompt: two blocks; b fits in the other two only if no headroom is kept
        assert (b in s.running) is (headroom == 0)
        for _ in range(3):
            step(s)
        assert s.num_preemptions == preemptions, headroom


def test_admission_headroom_admits_whatever_fits_when_nothing_runs(tiny_llama):
    s = scheduler(tiny_llama, blocks=2, admission_headroom=4.0)
    a = request("a", 8)  # two blocks: the whole pool
    s.add(a)
    step(s)
    assert s.running == [a], "headroom is for the running; an empty engine never waits on it"


def test_a_readmitted_request_keeps_its_first_admission_figures(tiny_llama):
    """After a recompute preemption the victim's own full blocks stay cached, so its re-admission
    hits them; what it reports as cached prompt tokens and first scheduled time stay those of
    its first admission."""
    s = scheduler(tiny_llama, blocks=5)
    a, b = request("a", range(101, 108)), request("b", 9)  # 2 blocks + 3 blocks: the whole pool
    s.add(a)
    s.add(b)
    step(s)
    assert b.status is Status.RUNNING
    first_time, cached = b.first_scheduled_time, b.num_cached_tokens
    assert first_time is not None
    steps_until(s, lambda out: b.status is not Status.RUNNING)  # a's third block comes from b
    s.finish(a, Status.FINISHED_STOPPED)
    out = step(s)
    assert out.admitted == [b] and out.prefix_hits == [("b", b.block_ids[:2], 8)]
    assert (b.first_scheduled_time, b.num_cached_tokens) == (first_time, cached) == (first_time, 0)


def test_admission_order_decides_the_victim(tiny_llama):
    s = scheduler(tiny_llama, blocks=6, seats=3)
    reqs = [request(r, 7) for r in "abc"]
    for r in reqs:
        s.add(r)
    step(s)
    assert [r.admitted_seq for r in reqs] == [1, 2, 3]
    out = steps_until(s, lambda out: out.preempted)
    assert out.preempted[0][0] is reqs[2]


def swapping(path, blocks=4, cpu_blocks=8):
    return scheduler(path, blocks=blocks, cpu_blocks=cpu_blocks, preemption_mode="swap")


def preempt_the_second_of_two(s: Scheduler):
    """Two 7-token requests, stepped until the pool runs short and b, the later admitted, is
    preempted. Returns a, b and the step that preempted."""
    a, b = request("a", 7), request("b", 7)
    s.add(a)
    s.add(b)
    return a, b, steps_until(s, lambda out: out.preempted)


def test_a_swapped_out_request_holds_cpu_blocks_and_no_one_is_admitted_before_it(tiny_llama):
    s = swapping(tiny_llama)
    a, b, out = preempt_the_second_of_two(s)
    assert out.preempted == [(b, "swap")] and list(s.swapped) == [b]
    assert b.status is Status.SWAPPED and len(b.cpu_block_ids) == 2 and b.block_ids == []
    assert len(s.cpu_blocks.free) == 6 and b.num_computed_tokens == 8, "its computed tokens travel with it"
    c = request("c", 1)
    s.add(c)
    out = step(s)  # one block free: c would fit, but swapped requests go first
    assert out.admitted == [] and list(s.waiting) == [c]


def test_swap_in_waits_for_room_to_grow_then_restores_fill_and_order(tiny_llama):
    s = swapping(tiny_llama, blocks=5)
    a, b, _ = preempt_the_second_of_two(s)
    # b holds 2 CPU blocks; it comes back only when 3 are free (its 2 and one to grow into)
    for _ in range(60):
        if s.pool.num_free_blocks >= 3:
            break
        assert step(s).swapped_in == []
        assert b in s.swapped
    s.finish(a, Status.FINISHED_STOPPED)
    out = step(s)
    assert out.swapped_in == [b] and b.status is Status.RUNNING and s.running[-1] is b
    assert b.cpu_block_ids == [] and len(s.cpu_blocks.free) == 8, "its CPU blocks are released"
    assert [s.pool.blocks[i].num_tokens for i in b.block_ids[:2]] == [4, 4]
    assert b.admitted_seq == 3, "swapped back in counts as its newest admission"
    assert b.num_hashed_blocks == 2


def test_finish_takes_a_request_out_of_every_queue_and_gives_back_every_block(tiny_llama):
    s = swapping(tiny_llama)
    a, b, _ = preempt_the_second_of_two(s)  # b is swapped out now
    cpu_free = len(s.cpu_blocks.free)
    assert s.finish(b, Status.FINISHED_ABORTED) == [] and b.status is Status.FINISHED_ABORTED
    assert len(s.cpu_blocks.free) == cpu_free + 2 and b.cpu_block_ids == [] and not s.swapped
    held = list(a.block_ids)
    assert s.finish(a, Status.FINISHED_STOPPED) == held
    assert a.block_ids == [] and s.running == [] and s.pool.num_used_blocks == 0
    assert not s.has_unfinished()


@pytest.mark.parametrize("budget", [4, 64])
def test_static_batching_reserves_whole_prompts_at_admission_even_past_the_budget(tiny_llama, budget):
    s = scheduler(tiny_llama, budget=budget, scheduling="static", seats=2)
    a, b, c = request("a", 10), request("b", 9), request("c", 3)
    for r in (a, b, c):
        s.add(r)
    out = step(s)
    assert out.admitted == [a, b], "the whole batch is admitted at once"
    assert (len(a.block_ids), len(b.block_ids)) == (3, 3), "blocks for each whole prompt, now"
    assert s.static_batch == {"a", "b"} and list(s.waiting) == [c]
    s.finish(a, Status.FINISHED_STOPPED)
    assert step(s).admitted == [], "c waits until every member of the batch is done"
    s.finish(b, Status.FINISHED_STOPPED)
    assert step(s).admitted == [c] and s.static_batch == {"c"}


def test_static_batching_with_a_prefix_hit_reserves_the_rest_of_the_prompt(tiny_llama):
    s = scheduler(tiny_llama, budget=4, scheduling="static")
    a = request("a", 9)
    s.add(a)
    steps_until(s, lambda out: a.num_computed_tokens >= 9)
    s.finish(a, Status.FINISHED_STOPPED)
    b = request("b", list(range(1, 9)) + [40, 41, 42, 43, 44])  # 13 tokens: 2 blocks shared, 2 new
    s.add(b)
    out = step(s)
    assert out.prefix_hits == [("b", b.block_ids[:2], 8)] and len(b.block_ids) == 4
    assert scheduled(out) == [("b", 4)], "the step computes up to its budget past the hit"


def test_preemptions_are_counted_for_the_engine_and_for_each_request(tiny_llama):
    """num_preemptions_total (the lesson's §5 signal) counts every preemption, and each request
    its own: b, preempted twice, says 2."""
    s = scheduler(tiny_llama, blocks=4)
    a, b, _ = preempt_the_second_of_two(s)  # once
    c = request("c", 10)  # needs 3 blocks: it cannot join b later, so b runs alone
    s.add(c)
    s.finish(a, Status.FINISHED_STOPPED)
    out = steps_until(s, lambda out: out.preempted)  # b grows until it needs a fifth block: its own victim
    assert out.preempted == [(b, "recompute")] and c.status is Status.WAITING
    assert (s.num_preemptions, b.num_preemptions, a.num_preemptions) == (2, 2, 0)


def test_recompute_mode_never_swaps_even_with_swap_space(tiny_llama):
    s = scheduler(tiny_llama, blocks=4, cpu_blocks=8)  # preemption_mode stays "recompute"
    _a, b, out = preempt_the_second_of_two(s)
    assert out.preempted == [(b, "recompute")] and b.cpu_block_ids == [] and len(s.cpu_blocks.free) == 8


def test_a_swapped_request_comes_back_as_soon_as_its_blocks_and_one_more_are_free(tiny_llama):
    """b holds 3 CPU blocks (9 computed tokens, the last block partly filled): it is swapped in
    on the step when 4 blocks are free, not one step later, is scheduled in that same step, and
    its blocks are filled as they were — 4, 4, 1 — with only its full blocks counted as hashed."""
    s = swapping(tiny_llama, blocks=6)
    a, b = request("a", 12), request("b", 9)
    s.add(a)
    s.add(b)
    step(s)  # 12 + 9 tokens: 3 blocks each, the whole pool
    out = step(s)  # a's 13th token needs a fourth block: b is swapped out
    assert out.preempted == [(b, "swap")] and len(b.cpu_block_ids) == 3 and b.num_computed_tokens == 9
    assert s.pool.num_free_blocks == 2
    s.finish(a, Status.FINISHED_STOPPED)  # 6 free now; hold back two so exactly 4 are free
    held = s.pool.allocate(2, "someone-else")
    assert s.pool.num_free_blocks == 4
    out = s.schedule()
    assert out.swapped_in == [b] and scheduled(out) == [("b", 1)], "back, and decoding in the same step"
    assert [s.pool.blocks[i].num_tokens for i in b.block_ids[:3]] == [4, 4, 1], "each block's fill restored"
    s.on_computed(b, 1)
    assert [s.pool.blocks[i].num_tokens for i in b.block_ids[:3]] == [4, 4, 2]
    assert b.num_hashed_blocks == 2
    s.pool.free(held, "someone-else")


def test_two_swapped_requests_come_back_in_one_step(tiny_llama):
    s = swapping(tiny_llama, blocks=9, cpu_blocks=8)
    reqs = [request(r, 7) for r in "abc"]
    for r in reqs:
        s.add(r)
    steps_until(s, lambda out: len(s.swapped) == 2)
    s.finish(reqs[0], Status.FINISHED_STOPPED)
    out = step(s)
    assert out.swapped_in == [reqs[1], reqs[2]] or out.swapped_in == [reqs[2], reqs[1]]
    assert {r.request_id for r, _ in out.scheduled} >= {"b", "c"}


def test_a_step_never_schedules_a_request_for_zero_tokens(tiny_llama):
    """Static batching admits a whole batch past the budget; with a budget of one token, a takes
    it all each step and b, though running, is not in the step (the engine hands every entry to
    the model: one of zero tokens would be an empty chunk)."""
    s = scheduler(tiny_llama, budget=1, scheduling="static", seats=2)
    a, b = request("a", 3), request("b", 3)
    s.add(a)
    s.add(b)
    for _ in range(4):
        out = step(s)
        assert s.running == [a, b] and scheduled(out) == [("a", 1)]


def test_the_last_token_of_the_budget_goes_to_the_next_running_request(tiny_llama):
    s = scheduler(tiny_llama, budget=2)
    a, b = request("a", 1), request("b", 1)
    s.add(a)
    s.add(b)
    for _ in range(3):
        assert scheduled(step(s)) == [("a", 1), ("b", 1)]


def swapped_beside_a_decode(path):
    """a decodes one token a step; c is swapped out and there is room to bring it back (b, whose
    growth pushed c out, has finished)."""
    s = swapping(path, blocks=7)
    a, b, c = request("a", 4), request("b", range(101, 109)), request("c", range(201, 213))  # 1 + 2 + 3 blocks
    for r in (a, b, c):
        s.add(r)
    step(s)
    out = step(s)  # a takes the last free block; b needs a third: c, the newest, is swapped out
    assert out.preempted == [(c, "swap")] and len(c.cpu_block_ids) == 3
    s.finish(b, Status.FINISHED_STOPPED)
    assert s.pool.num_free_blocks >= len(c.cpu_block_ids) + 1
    return s, a, c


@pytest.mark.parametrize(("budget", "back"), [(1, False), (2, True)])
def test_a_swap_in_needs_a_token_of_the_budget(tiny_llama, budget, back):
    s, a, c = swapped_beside_a_decode(tiny_llama)
    s.config.max_num_batched_tokens = budget  # from here on
    out = step(s)
    assert (out.swapped_in == [c]) is back
    assert scheduled(out) == ([("a", 1), ("c", 1)] if back else [("a", 1)])


def test_what_a_swap_in_takes_of_the_budget_is_left_to_new_requests(tiny_llama):
    s, a, c = swapped_beside_a_decode(tiny_llama)
    s.add(request("d", range(301, 311)))
    s.config.max_num_batched_tokens = 4  # from here on
    assert scheduled(step(s)) == [("a", 1), ("c", 1), ("d", 2)]


def test_a_preempted_member_of_a_static_batch_rejoins_it_while_the_batch_runs(tiny_llama):
    """Static batching holds new requests back until the batch is done, but a member pushed out
    by a preemption is still one of the batch: it comes back as soon as there is room."""
    s = scheduler(tiny_llama, blocks=6, seats=3, scheduling="static")
    a, b, c = request("a", range(1, 8)), request("b", range(101, 108)), request("c", range(201, 208))
    for r in (a, b, c):
        s.add(r)
    out = steps_until(s, lambda out: out.preempted)
    assert out.preempted == [(c, "recompute")] and s.static_batch == {"a", "b", "c"}
    step(s)
    s.finish(b, Status.FINISHED_STOPPED)
    assert step(s).admitted == [c] and a.status is Status.RUNNING


def test_blocks_reserved_ahead_of_the_tokens_hold_nothing(tiny_llama):
    """The naive reservation (§1.2) takes blocks for max-model-len up front: those past the
    computed tokens hold nothing, and that emptiness is the waste the lesson counts."""
    s = scheduler(tiny_llama, blocks=8, kv_reservation="max_len")  # a request may reach 8 blocks here
    a = request("a", 5)
    s.add(a)
    step(s)
    assert [s.pool.blocks[i].num_tokens for i in a.block_ids] == [4, 1, 0, 0, 0, 0, 0, 0]

"""The block pool on its own: allocation, sharing, LRU eviction of cached blocks, invariants."""
import pytest

from engine.block_pool import BlockPool, OutOfBlocks, hash_block


def test_allocate_and_free_return_blocks_at_once():
    pool = BlockPool(4)
    ids = pool.allocate(3, "a")
    assert pool.num_free_blocks == 1
    pool.check({"a": ids})
    pool.free(ids, "a")
    assert pool.num_free_blocks == 4
    pool.check({})


def test_out_of_blocks_names_the_shortfall():
    pool = BlockPool(2)
    with pytest.raises(OutOfBlocks, match="need 3 blocks, 2 free"):
        pool.allocate(3, "a")


def test_chained_hash_depends_on_every_earlier_token():
    first = hash_block(None, [1, 2, 3, 4])
    assert hash_block(first, [5, 6]) != hash_block(hash_block(None, [9, 2, 3, 4]), [5, 6])
    assert hash_block(first, [5, 6]) == hash_block(hash_block(None, [1, 2, 3, 4]), [5, 6])


def test_cached_blocks_survive_their_owner_and_are_shared_with_ref_counts():
    pool = BlockPool(4)
    [b] = pool.allocate(1, "a")
    pool.register(b, 111)
    pool.free([b], "a")
    assert pool.num_cached_free_blocks == 1
    assert pool.lookup([111, 222]) == [b]  # the run stops at the first miss
    pool.touch([b], "x")
    pool.touch([b], "y")
    assert pool.blocks[b].ref_cnt == 2 and pool.blocks[b].owners == {"x", "y"}
    pool.check({"x": [b], "y": [b]})


def test_least_recently_used_cached_block_is_evicted_first():
    pool = BlockPool(3)
    a, b, c = pool.allocate(3, "r")
    for block, h in ((a, 1), (b, 2), (c, 3)):
        pool.register(block, h)
    pool.free([a], "r")
    pool.free([b], "r")
    pool.free([c], "r")  # free order: a, b, c → a is the least recently used
    [taken] = pool.allocate(1, "s")
    assert taken == a
    assert pool.lookup([1]) == [] and pool.lookup([2]) == [b]
    assert pool.evictions == 1


def test_prefix_caching_off_never_hits():
    pool = BlockPool(2, enable_prefix_caching=False)
    [b] = pool.allocate(1, "a")
    pool.register(b, 5)
    pool.free([b], "a")
    assert pool.lookup([5]) == []


def test_an_evicted_block_starts_empty_counts_its_eviction_and_can_be_cached_again():
    pool = BlockPool(2)
    a, b = pool.allocate(2, "r")
    for block, h in ((a, 1), (b, 2)):
        pool.blocks[block].num_tokens = 16  # full
        pool.register(block, h)
    pool.free([a, b], "r")  # tail first: b, then a — a is the most recently used
    assert pool.num_cached_free_blocks == 2 and pool.blocks[a].num_tokens == 16  # a cached block keeps its tokens
    first, second = pool.allocate(2, "s")  # both evicted
    assert (first, second) == (b, a) and pool.evictions == 2
    assert pool.blocks[first].num_tokens == 0 and pool.blocks[second].num_tokens == 0
    assert pool.num_cached_free_blocks == 0 and pool.lookup([1]) == [] and pool.lookup([2]) == []
    pool.register(first, 7)  # its new contents are findable
    pool.free([first, second], "s")
    assert pool.lookup([7]) == [first] and pool.num_cached_free_blocks == 1


def test_freeing_a_partly_filled_block_forgets_its_tokens():
    pool = BlockPool(1)
    [b] = pool.allocate(1, "r")
    pool.blocks[b].num_tokens = 5  # never full, never cached
    pool.free([b], "r")
    assert pool.blocks[b].num_tokens == 0 and pool.num_cached_free_blocks == 0


def test_check_names_the_invariant_that_broke():
    pool = BlockPool(3)
    ids = pool.allocate(2, "a")
    pool.check({"a": ids})
    with pytest.raises(AssertionError, match=r"block \d: owners"):
        pool.check({})
    pool.free_queue[ids[0]] = None  # a used block also queued as free: one too many
    with pytest.raises(AssertionError, match="^free \\+ used != total$"):
        pool.check({"a": ids})
    del pool.free_queue[2]  # the counts add up again, yet a used block waits in the free queue
    with pytest.raises(AssertionError, match="^a used block is in the free queue$"):
        pool.check({"a": ids})

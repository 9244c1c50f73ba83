"""Property-based: any sequence of allocate / register / share / free on the block pool keeps its
books: used + cached + free == total, every block's owners and ref count are exactly the block
tables that name it, a cache hit finds a block holding that hash, and an evicted hash is gone."""
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine.block_pool import BlockPool, OutOfBlocks

NUM_BLOCKS = 8


class PoolMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.pool = BlockPool(NUM_BLOCKS)
        self.tables: dict[str, list[int]] = {}  # what the scheduler would hold: owner → block ids
        self.hashes: dict[int, int] = {}  # hash → block it was registered on (while not evicted)
        self.next_owner = 0

    def _new_owner(self) -> str:
        self.next_owner += 1
        return f"r{self.next_owner}"

    @rule(n=st.integers(1, 4), extend=st.booleans(), data=st.data())
    def allocate(self, n, extend, data):
        owner = data.draw(st.sampled_from(sorted(self.tables))) if extend and self.tables else self._new_owner()
        free_before = self.pool.num_free_blocks
        try:
            ids = self.pool.allocate(n, owner)
        except OutOfBlocks:
            assert n > free_before
            return
        assert len(set(ids)) == n and not set(ids) & {b for t in self.tables.values() for b in t}
        for block_id in ids:  # an evicted block's hash is no longer findable
            for h, b in list(self.hashes.items()):
                if b == block_id:
                    del self.hashes[h]
                    assert self.pool.lookup([h]) == []
        self.tables.setdefault(owner, []).extend(ids)

    @precondition(lambda self: self.tables)
    @rule(data=st.data(), h=st.integers(0, 2**63))
    def register(self, data, h):
        owner = data.draw(st.sampled_from(sorted(self.tables)))
        block_id = data.draw(st.sampled_from(self.tables[owner]))
        had_hash = self.pool.blocks[block_id].block_hash is not None
        self.pool.register(block_id, h)
        if not had_hash and h not in self.hashes:
            self.hashes[h] = block_id  # first writer wins
        assert self.pool.lookup([h]) == [self.hashes[h]] if h in self.hashes else True

    @precondition(lambda self: self.hashes)
    @rule(data=st.data())
    def share_a_cached_prefix(self, data):
        h = data.draw(st.sampled_from(sorted(self.hashes)))
        hits = self.pool.lookup([h])
        assert hits == [self.hashes[h]]
        owner = self._new_owner()
        self.pool.touch(hits, owner)
        self.tables[owner] = list(hits)

    @precondition(lambda self: self.tables)
    @rule(data=st.data())
    def free(self, data):
        owner = data.draw(st.sampled_from(sorted(self.tables)))
        ids = self.tables.pop(owner)
        released = self.pool.free(ids, owner)
        still_held = {b for t in self.tables.values() for b in t}
        assert set(released) == set(ids) - still_held

    @invariant()
    def books_balance(self):
        pool = self.pool
        used = sum(1 for b in pool.blocks if b.ref_cnt > 0)
        cached = pool.num_cached_free_blocks
        plain_free = pool.num_free_blocks - cached
        assert used + cached + plain_free == NUM_BLOCKS
        assert used == len({b for t in self.tables.values() for b in t})
        pool.check(self.tables)  # owners and ref counts == the tables, cache entries point home
        for h, block_id in self.hashes.items():
            assert pool.lookup([h]) == [block_id]


TestBlockPoolBooks = PoolMachine.TestCase
TestBlockPoolBooks.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)

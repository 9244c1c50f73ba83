"""Physical KV blocks: who owns them, which are free, and the prefix cache over them.

A block is *used* (ref_cnt > 0), *cached* (ref_cnt == 0 but it still holds a full block of
known tokens, findable by its hash) or *free* (nothing worth keeping). Free and cached blocks
wait in one LRU queue; allocation takes from the front, so the least recently used cached
block is the first to be evicted. used + cached + free == num_blocks, always.
"""
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field


class OutOfBlocks(RuntimeError):
    pass


@dataclass(slots=True, eq=False)
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None  # set once the block is full and registered in the prefix cache
    owners: set[str] = field(default_factory=set)
    num_tokens: int = 0  # filled slots, for drawing and waste accounting


def hash_block(parent_hash: int | None, token_ids) -> int:
    """Chained hash: a block's identity includes every token before it, so a hit on block i
    implies the whole prefix up to block i matches. (The byte layout is no promise — any
    injective one will do, and no hash outlives the process — so mutation testing skips it.)"""
    h = hashlib.blake2b(digest_size=8)
    h.update((parent_hash or 0).to_bytes(8, "little", signed=False))  # pragma: no mutate
    h.update(b"".join(int(t).to_bytes(4, "little", signed=False) for t in token_ids))  # pragma: no mutate
    return int.from_bytes(h.digest(), "little")  # pragma: no mutate


class BlockPool:
    def __init__(self, num_blocks: int, enable_prefix_caching: bool = True):
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}  # block hash → block id
        self.evictions = 0

    # --- counts -------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now (free ones and evictable cached ones)."""
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    @property
    def num_cached_free_blocks(self) -> int:
        return sum(1 for i in self.free_queue if self.blocks[i].block_hash is not None)

    # --- allocation ---------------------------------------------------------------------------
    def allocate(self, n: int, owner: str) -> list[int]:
        if n > len(self.free_queue):
            raise OutOfBlocks(f"need {n} blocks, {len(self.free_queue)} free")
        ids = []
        for _ in range(n):
            block_id, _ = self.free_queue.popitem(last=False)  # pragma: no mutate (last=None is False)
            block = self.blocks[block_id]
            if block.block_hash is not None:  # evict the LRU cached block
                if self.cached.get(block.block_hash) == block_id:
                    del self.cached[block.block_hash]
                block.block_hash = None
                self.evictions += 1
            block.ref_cnt = 1
            block.owners = {owner}
            block.num_tokens = 0
            ids.append(block_id)
        return ids

    def touch(self, block_ids: list[int], owner: str) -> None:
        """Share cached blocks with a new owner (a prefix-cache hit)."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.ref_cnt == 0:  # an unowned block always waits in the free queue
                del self.free_queue[block_id]
            block.ref_cnt += 1
            block.owners.add(owner)

    def free(self, block_ids: list[int], owner: str) -> list[int]:
        """Drop one owner's reference. Returns the blocks that became unowned. Blocks are
        released tail first so a request's last blocks are evicted before its shared prefix."""
        released = []
        for block_id in reversed(block_ids):
            block = self.blocks[block_id]
            block.ref_cnt -= 1
            block.owners.discard(owner)
            if block.ref_cnt == 0:
                if block.block_hash is None:
                    block.num_tokens = 0
                self.free_queue[block_id] = None  # most recently used end  # pragma: no mutate (the value is unused)
                released.append(block_id)
        return released

    # --- prefix cache -------------------------------------------------------------------------
    def lookup(self, hashes: list[int]) -> list[int]:
        """The longest run of leading block hashes present in the cache → their block ids."""
        hits = []
        if not self.enable_prefix_caching:
            return hits
        for h in hashes:
            block_id = self.cached.get(h)
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def register(self, block_id: int, block_hash: int) -> None:
        """A block became full: make it findable by hash (first writer wins on duplicates)."""
        if not self.enable_prefix_caching:
            return
        block = self.blocks[block_id]
        if block.block_hash is None and block_hash not in self.cached:
            block.block_hash = block_hash
            self.cached[block_hash] = block_id

    # --- checks -------------------------------------------------------------------------------
    def check(self, tables: dict[str, list[int]]) -> None:
        """Invariants the tests assert after every step: counts add up, owners match tables."""
        used = {b.block_id for b in self.blocks if b.ref_cnt > 0}
        assert len(used) + len(self.free_queue) == self.num_blocks, "free + used != total"
        assert used.isdisjoint(self.free_queue), "a used block is in the free queue"
        expected: dict[int, set[str]] = {}
        for owner, ids in tables.items():
            for block_id in ids:
                expected.setdefault(block_id, set()).add(owner)
        for block in self.blocks:
            owners = expected.get(block.block_id, set())
            assert block.owners == owners, f"block {block.block_id}: owners {block.owners} != {owners}"
            assert block.ref_cnt == len(owners), f"block {block.block_id}: ref_cnt {block.ref_cnt} != {len(owners)}"
        for block_hash, block_id in self.cached.items():
            assert self.blocks[block_id].block_hash == block_hash

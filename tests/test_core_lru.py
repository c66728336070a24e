"""The core's LRU (core/_tree.py: a dict and a queue of keys) against the
``OrderedDict`` it replaced (pulsarcast_ipfs.testing._lru_reference): random puts,
re-puts, pops, lookups and limit changes give the same answers, contents and order,
and the queue stays within a bound of the live keys."""

from __future__ import annotations

import random

import pytest

from pulsarcast_ipfs.core._tree import LRU
from pulsarcast_ipfs.testing._lru_reference import ReferenceLRU


@pytest.mark.parametrize(
    ("limit", "keys", "seed"), [(1, 3, 1), (8, 20, 2), (64, 70, 3), (50, 5000, 4)]
)
def test_same_operations_same_cache(limit: int, keys: int, seed: int) -> None:
    rng = random.Random(seed)
    lru, ref = LRU(limit), ReferenceLRU(limit)
    for step in range(20_000):
        key = rng.randrange(keys)
        r = rng.random()
        if r < 0.6:
            value = rng.randrange(1000)
            lru.put(key, value)
            ref.put(key, value)
        elif r < 0.75:
            assert lru.pop(key) == ref.pop(key)
        elif r < 0.999:
            assert (key in lru) == (key in ref)
            assert lru.get(key) == ref.get(key)
        else:
            lru.limit = ref.limit = max(1, limit + rng.randrange(-limit // 2 - 1, limit + 1))
            lru.put(key)
            ref.put(key)
        assert len(lru) == len(ref)
        if step % 97 == 0:
            assert lru.items() == ref.items()
        assert len(lru._q) <= 2 * len(lru) + 65
    assert lru.items() == ref.items()


def test_a_key_put_again_is_the_newest() -> None:
    lru = LRU(3)
    for k in "abc":
        lru.put(k)
    lru.put("a")
    lru.put("d")  # evicts b, the oldest now
    assert [k for k, _ in lru.items()] == ["c", "a", "d"]
    lru.pop("c")
    lru.put("e")
    lru.put("f")  # evicts a
    assert [k for k, _ in lru.items()] == ["d", "e", "f"]

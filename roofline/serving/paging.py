"""KV-cache memory management: contiguous vs paged allocation, shared prefixes, the thought-tree experiment.

Contiguous allocation reserves a request's maximum length up front (internal fragmentation: the
unused tail); paged allocation (vLLM, Kwon et al. SOSP 2023) hands out blocks of b tokens as the
sequence grows, so a sequence wastes at most b − 1 slots and any free block fits anywhere (no
external fragmentation). With prefix sharing the full blocks of a shared prefix are stored once,
reference-counted; the partly filled last prefix block is copied on the first write of each branch.
A contiguous allocator placing variable-size reservations first-fit as requests come and go also
fragments externally: free slots scattered in holes too small for the next request (`replay`).
Left out: eviction and swapping, compaction, best-fit and buddy allocators.
"""
from __future__ import annotations

import numpy as np

from ..deployment import Deployment
from ..model import DECODE, PREFILL, decode_context
from ..sharding import whole


def _blocks(tokens, block: int) -> np.ndarray:
    if block < 1:
        raise ValueError(f"block_size: must be >= 1 token, got {block!r}")
    return -(-np.asarray(tokens, dtype=np.int64) // block)


def contiguous_waste(lengths, max_len: int) -> np.ndarray:
    """Slots reserved but never written when every request reserves `max_len` tokens."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if np.any(lengths > max_len):
        raise ValueError(f"max_len: {max_len} is shorter than a sequence of {int(lengths.max())} tokens")
    return max_len - lengths


def paged_waste(lengths, block: int) -> np.ndarray:
    """Unused slots in each sequence's last block."""
    return _blocks(lengths, block) * block - np.asarray(lengths, dtype=np.int64)


def sequences_that_fit(capacity_tokens: int, lengths, block: int | None = None, max_len: int | None = None) -> int:
    """How many of the sequences, taken in order, fit: paged blocks, or contiguous max_len reservations."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if block is None:
        per = np.full(lengths.shape, lengths.max() if max_len is None else max_len)
        contiguous_waste(lengths, int(per.max()))
    else:
        per = _blocks(lengths, block) * block
    return int(np.searchsorted(np.cumsum(per), capacity_tokens, side="right"))


def _first_fit(holes: list[list[int]], size: int) -> int | None:
    """Take `size` slots from the lowest-address hole that holds them; holes are [start, length], sorted."""
    for hole in holes:
        if hole[1] >= size:
            start = hole[0]
            hole[0], hole[1] = hole[0] + size, hole[1] - size
            if not hole[1]:
                holes.remove(hole)
            return start
    return None


def _release(holes: list[list[int]], start: int, size: int) -> None:
    """Return [start, start + size) and merge it with the holes it touches."""
    holes.append([start, size])
    holes.sort()
    merged = [holes[0]]
    for hole in holes[1:]:
        if merged[-1][0] + merged[-1][1] == hole[0]:
            merged[-1][1] += hole[1]
        else:
            merged.append(hole)
    holes[:] = merged


def replay(capacity: int, sizes, arrivals, departures, block: int | None = None) -> dict:
    """Requests holding `sizes` slots from arrival to departure in a pool of `capacity` slots.

    block None: each request takes one contiguous run, first fit; else ceil(size / block) blocks from
    anywhere. A request that cannot be placed on arrival is turned away (no queue). At equal times
    departures free their slots first. Returns admitted (per request), refused, and refused_with_room:
    turned away although enough slots were free in total (external fragmentation; never when paged).
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if np.any(sizes < 1) or np.any(np.asarray(departures) <= np.asarray(arrivals)):
        raise ValueError("replay: every request needs >= 1 slot and must depart after it arrives")
    need = sizes if block is None else _blocks(sizes, block) * block
    capacity = capacity if block is None else capacity // block * block  # a partial block holds nothing
    events = sorted([(t, 0, i) for i, t in enumerate(departures)] + [(t, 1, i) for i, t in enumerate(arrivals)])
    holes, free, placed = [[0, capacity]], capacity, {}
    admitted, with_room = np.zeros(len(sizes), dtype=bool), 0
    for _, arriving, i in events:
        if not arriving:
            if i in placed:
                free += need[i]
                if block is None:
                    _release(holes, placed[i], int(need[i]))
                del placed[i]
            continue
        start = (_first_fit(holes, int(need[i])) if block is None else 0) if need[i] <= free else None
        if start is None:
            with_room += int(free >= sizes[i])
            continue
        placed[i], free, admitted[i] = start, free - need[i], True
    return {"admitted": admitted, "refused": int((~admitted).sum()), "refused_with_room": with_room}


def shared_prefix_blocks(prefix: int, suffixes, block: int) -> dict[str, int]:
    """Blocks for branches that share `prefix` tokens and each add their own suffix.

    Covers a shared system prompt (suffix = user turn + reply), n parallel samples of one prompt
    (suffix = the sample) and beam or tree search of width W (suffix = the branch). Every branch is
    taken to write at least one token (so each copies the partial prefix block).
    """
    suffixes = np.asarray(suffixes, dtype=np.int64)
    separate = int(_blocks(prefix + suffixes, block).sum())
    full, partial = divmod(prefix, block)
    shared = full + int(_blocks(partial + suffixes, block).sum())
    return {"separate": separate, "shared": shared, "saved_fraction": 1 - shared / separate}


def thought_tree(d: Deployment, width: int, prefix: int, steps: int) -> dict[str, dict]:
    """W branches decoding `steps` tokens after a shared prefix, three ways; seconds and KV bytes of each.

    shared_cache: one prefill of the prefix, then W sequences decode as one batch over a shared cache
                  (each branch still reads the prefix's keys: paged attention, no cascade kernel).
    no_cache:     every step reruns the full sequences of all W branches (T = S, padded to the longest).
    independent:  W requests, each prefilling the prefix and keeping its own cache.
    Steps are priced by the Deployment (engine and tensor parallelism included); KV bytes are one GPU's.
    """
    for name, value in (("width", width), ("prefix", prefix), ("steps", steps)):
        whole(name, value)

    def seconds(phase, batch, context):
        return np.asarray(d.step(phase, float(batch), np.asarray(context, dtype=float)).total_s, dtype=float)

    contexts = decode_context(prefix + np.arange(0, steps))  # step j sees the prefix and j new keys
    decode = float(seconds(DECODE, width, contexts[:-1]).sum()) if steps > 1 else 0.0
    kv = lambda tokens: float(d.compiled.kv_cache(1.0, float(tokens), d.precision.kv_bytes))  # noqa: E731
    first = float(seconds(PREFILL, 1, prefix))
    return {
        "shared_cache": {"seconds": first + decode, "kv_bytes": kv(prefix) + width * kv(steps)},
        "no_cache": {"seconds": float(seconds(PREFILL, width, contexts - 1).sum()), "kv_bytes": 0.0},
        "independent": {"seconds": float(seconds(PREFILL, width, prefix)) + decode,
                        "kv_bytes": width * kv(prefix + steps)},
    }

"""KV paging and prefix sharing against a brute-force block allocator; the thought-tree experiment against the library."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import Precision, load_hardware, load_model
from roofline.compiled import compile_model
from roofline.deployment import Deployment
from roofline.evaluate import evaluate
from roofline.serving.paging import (contiguous_waste, paged_waste, replay, sequences_that_fit, shared_prefix_blocks,
                             thought_tree)


class BlockAllocator:
    """Token-by-token appends into blocks with reference counts and copy-on-write (vLLM's block manager, minimal)."""

    def __init__(self, block: int):
        self.block, self.fill, self.refs, self.next = block, {}, {}, 0

    def new(self) -> int:
        self.next += 1
        self.fill[self.next], self.refs[self.next] = 0, 1
        return self.next

    def append(self, table: list) -> None:
        if not table or self.fill[table[-1]] == self.block:
            table.append(self.new())
        elif self.refs[table[-1]] > 1:  # writing into a shared, partly filled block: copy it first
            old = table[-1]
            self.refs[old] -= 1
            table[-1] = self.new()
            self.fill[table[-1]] = self.fill[old]
        self.fill[table[-1]] += 1

    def fork(self, table: list) -> list:
        for b in table:
            self.refs[b] += 1
        return list(table)

    def live_blocks(self) -> int:
        return sum(1 for b, r in self.refs.items() if r > 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 200), min_size=1, max_size=20), st.integers(1, 64))
def test_paged_waste_is_what_a_block_allocator_leaves_unfilled(lengths, block):
    allocator = BlockAllocator(block)
    for length in lengths:
        table = []
        for _ in range(length):
            allocator.append(table)
    assert allocator.live_blocks() * block - sum(lengths) == paged_waste(lengths, block).sum()
    assert np.all(paged_waste(lengths, block) < block)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.lists(st.integers(1, 100), min_size=1, max_size=8), st.integers(1, 32))
def test_shared_prefix_blocks_match_a_copy_on_write_allocator(prefix, suffixes, block):
    allocator = BlockAllocator(block)
    root = []
    for _ in range(prefix):
        allocator.append(root)
    branches = [allocator.fork(root) for _ in suffixes]
    allocator.refs.update({b: allocator.refs[b] - 1 for b in root})  # the root itself is released
    for table, suffix in zip(branches, suffixes):
        for _ in range(suffix):
            allocator.append(table)
    counted = shared_prefix_blocks(prefix, suffixes, block)
    assert allocator.live_blocks() == counted["shared"]
    assert counted["shared"] <= counted["separate"]


def test_sequences_that_fit_is_a_brute_force_count():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 2000, 200)
    for capacity in (0, 5000, 60_000, 10**9):
        for block, max_len in ((16, None), (None, 2048)):
            used, count = 0, 0
            for length in lengths:
                need = -(-length // block) * block if block else max_len
                if used + need > capacity:
                    break
                used, count = used + need, count + 1
            assert sequences_that_fit(capacity, lengths, block, max_len) == count


def test_contiguous_reservation_wastes_the_tail_and_paging_fits_more():
    lengths = np.array([100, 900, 300, 2048, 50])
    assert list(contiguous_waste(lengths, 2048)) == [1948, 1148, 1748, 0, 1998]
    assert sequences_that_fit(4000, lengths, 16) == 5 > sequences_that_fit(4000, lengths, None, 2048) == 1
    with pytest.raises(ValueError, match="max_len"):
        contiguous_waste(lengths, 1000)


def test_n_samples_of_one_long_prompt_store_the_prompt_once():
    counts = shared_prefix_blocks(4096, [256] * 8, 16)
    assert counts["separate"] == 8 * (4096 + 256) // 16
    assert counts["shared"] == 4096 // 16 + 8 * 256 // 16
    assert counts["saved_fraction"] > 0.8


def test_first_fit_leaves_holes_too_small_for_a_request_that_paging_places():
    # slots 0-3 A (t 0-3), 4-5 B (t 1-10), 6-8 C (t 2-4), 9 free; after A and C leave the holes are
    # 0-3 and 6-9: 8 slots free, none 5 long, so D (5 slots at t 5) is refused; E (2 at t 6) takes 0-1.
    sizes, arrivals, departures = [4, 2, 3, 5, 2], [0, 1, 2, 5, 6], [3, 10, 4, 9, 9]
    contiguous = replay(10, sizes, arrivals, departures)
    assert list(contiguous["admitted"]) == [True, True, True, False, True]
    assert contiguous["refused"] == contiguous["refused_with_room"] == 1
    for block in (1, 2):  # blocks of 2: A, B, C take 2 + 1 + 2 of 5 blocks, D then 3 of the 4 freed
        paged = replay(10, sizes, arrivals, departures, block)
        assert list(paged["admitted"]) == [True] * 5 and paged["refused"] == 0
    # Blocks of 4: 8 usable slots, A and B (rounded up to 4) fill them, so C is refused; after A leaves
    # D (8) does not fit in 4 but E (4) does. Rounding wastes slots inside blocks, never free ones.
    rounded = replay(10, sizes, arrivals, departures, block=4)
    assert list(rounded["admitted"]) == [True, True, False, False, True]
    assert rounded["refused"] == 2 and rounded["refused_with_room"] == 0


def slot_array_first_fit(capacity, sizes, arrivals, departures):
    """The pool as one owner per slot; a request takes the first run of free slots long enough."""
    owner, admitted, with_room = [None] * capacity, [False] * len(sizes), 0
    for _, arriving, i in sorted([(t, 0, i) for i, t in enumerate(departures)]
                                 + [(t, 1, i) for i, t in enumerate(arrivals)]):
        if not arriving:
            owner = [None if o == i else o for o in owner]
            continue
        start = next((s for s in range(capacity - sizes[i] + 1) if all(o is None for o in owner[s:s + sizes[i]])), None)
        if start is None:
            with_room += owner.count(None) >= sizes[i]
        else:
            owner[start:start + sizes[i]], admitted[i] = [i] * sizes[i], True
    return admitted, with_room


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 40), st.integers(1, 8), st.lists(st.tuples(st.integers(1, 12), st.integers(0, 30), st.integers(1, 15)),
                                    min_size=1, max_size=25))
def test_contiguous_replay_matches_a_slot_array_first_fit_and_paging_never_refuses_with_room(capacity, block,
                                                                                           requests):
    sizes = [s for s, _, _ in requests]
    arrivals = [a for _, a, _ in requests]
    departures = [a + d for _, a, d in requests]
    admitted, with_room = slot_array_first_fit(capacity, sizes, arrivals, departures)
    got = replay(capacity, sizes, arrivals, departures)
    assert list(got["admitted"]) == admitted and got["refused_with_room"] == with_room
    assert replay(capacity, sizes, arrivals, departures, block)["refused_with_room"] == 0


def test_under_churn_contiguous_first_fit_turns_away_requests_that_paging_admits():
    rng = np.random.default_rng(0)
    n = 400
    sizes, arrivals = rng.integers(64, 2048, n), np.cumsum(rng.exponential(1.0, n))
    departures = arrivals + rng.exponential(20.0, n)
    contiguous = replay(16_384, sizes, arrivals, departures)
    paged = replay(16_384, sizes, arrivals, departures, block=16)
    assert contiguous["refused_with_room"] > 0.1 * contiguous["refused"] > 0
    assert paged["admitted"].sum() > contiguous["admitted"].sum()


H100 = load_hardware("h100-sxm")


def test_thought_tree_times_are_the_librarys_prefill_and_decode_steps():
    width, prefix, steps = 8, 1024, 64
    tree = thought_tree(Deployment.of("llama-3.1-8b", H100), width, prefix, steps)
    cm, p = compile_model(load_model("llama-3.1-8b")), Precision()
    independent = evaluate(Deployment(cm.config, H100, p), float(width), float(prefix), float(steps))
    assert tree["independent"]["seconds"] == pytest.approx(float(independent["e2e_s"]), rel=1e-6)
    one = evaluate(Deployment(cm.config, H100, p), 1.0, float(prefix), 1.0)
    shared = float(one["ttft_s"]) + float(independent["e2e_s"]) - float(independent["ttft_s"])
    assert tree["shared_cache"]["seconds"] == pytest.approx(shared, rel=1e-6)
    rerun = sum(float(evaluate(Deployment(cm.config, H100, p), float(width), float(prefix + j), 1.0)["ttft_s"])
                for j in range(steps))
    assert tree["no_cache"]["seconds"] == pytest.approx(rerun, rel=1e-9)


def test_a_shared_cache_beats_independent_requests_which_beat_rerunning_without_a_cache():
    tree = thought_tree(Deployment.of("llama-3.1-8b", H100), 16, 2048, 128)
    assert tree["shared_cache"]["seconds"] < tree["independent"]["seconds"] < tree["no_cache"]["seconds"]
    assert tree["shared_cache"]["kv_bytes"] < tree["independent"]["kv_bytes"] / 8

"""KV paging and prefix sharing against a brute-force block allocator; the thought-tree experiment against the library."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import Precision, load_hardware, load_model
from roofline.evaluate import compile_model
from roofline.inference import evaluate
from roofline.paging import (contiguous_waste, paged_waste, sequences_that_fit, shared_prefix_blocks,
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


H100 = load_hardware("h100-sxm")


def test_thought_tree_times_are_the_librarys_prefill_and_decode_steps():
    width, prefix, steps = 8, 1024, 64
    tree = thought_tree("llama-3.1-8b", H100, width, prefix, steps)
    cm, p = compile_model(load_model("llama-3.1-8b")), Precision()
    independent = evaluate(cm, H100, p, float(width), float(prefix), float(steps))
    assert tree["independent"]["seconds"] == pytest.approx(float(independent["e2e_s"]), rel=1e-6)
    one = evaluate(cm, H100, p, 1.0, float(prefix), 1.0)
    shared = float(one["ttft_s"]) + float(independent["e2e_s"]) - float(independent["ttft_s"])
    assert tree["shared_cache"]["seconds"] == pytest.approx(shared, rel=1e-6)
    rerun = sum(float(evaluate(cm, H100, p, float(width), float(prefix + j), 1.0)["ttft_s"]) for j in range(steps))
    assert tree["no_cache"]["seconds"] == pytest.approx(rerun, rel=1e-9)


def test_a_shared_cache_beats_independent_requests_which_beat_rerunning_without_a_cache():
    tree = thought_tree("llama-3.1-8b", H100, 16, 2048, 128)
    assert tree["shared_cache"]["seconds"] < tree["independent"]["seconds"] < tree["no_cache"]["seconds"]
    assert tree["shared_cache"]["kv_bytes"] < tree["independent"]["kv_bytes"] / 8

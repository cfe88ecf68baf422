"""Resident memory per step, and the warning a steady leak gets (once per process kind)."""

import mmap

from asyncrl.runtime.memory import GrowthWatch, rss_mb


def test_rss_is_this_processes_and_sees_an_allocation():
    # a fresh anonymous mapping: a heap allocation could reuse pages the allocator kept resident
    # after earlier tests in this process freed them, and RSS would not move
    before = rss_mb()
    block = mmap.mmap(-1, 64 * 2**20)
    for page in range(0, len(block), mmap.PAGESIZE):
        block[page] = 1  # touched: resident, not only reserved
    assert rss_mb() - before > 48
    block.close()


def test_steady_growth_warns_once():
    watch = GrowthWatch(window=4, min_growth=0.25)
    lines = [watch.observe(step, "memory/worker_rss_mb", 400 + 40 * step) for step in range(1, 10)]
    warned = [line for line in lines if line]
    assert len(warned) == 1 and lines.index(warned[0]) == 4  # the 5th value closes the first window
    assert warned[0].startswith("asyncrl: warning: step 5: memory/worker_rss_mb rose at each of the last 4 steps, "
                                "440 -> 600 MiB")


def test_noise_or_small_growth_does_not_warn():
    watch = GrowthWatch(window=4, min_growth=0.25)
    wobbly = [500, 520, 510, 530, 540, 550, 560]  # one step down
    slow = [500, 501, 502, 503, 504, 505, 506]  # rising, by 1 %
    assert not any(watch.observe(i, "a", v) for i, v in enumerate(wobbly))
    assert not any(watch.observe(i, "b", v) for i, v in enumerate(slow))

"""policy.torch_threads: 0 shares the cores out so each mode has the whole machine (a benchmark
suite refusing a sync baseline given fewer cores than an async arm: tests/bench/test_fair_threads.py)."""


from asyncrl.config import load_config
from asyncrl.config.threads import ThreadPlan, available_cores, thread_plan


def _cfg(*overrides):
    return load_config(None, list(overrides))


def test_auto_gives_sync_every_core_and_async_the_rest_after_its_workers():
    assert thread_plan(_cfg("run.mode=sync"), cores=8) == ThreadPlan(8, 0)
    assert thread_plan(_cfg("run.mode=simulated"), cores=8) == ThreadPlan(8, 0)
    assert thread_plan(_cfg("run.mode=async", "async.n_workers=3"), cores=8) == ThreadPlan(5, 3)
    assert thread_plan(_cfg("run.mode=async"), cores=2).total == 2  # the 2-core default: 1 + 1
    assert thread_plan(_cfg("run.mode=async", "async.n_workers=4"), cores=2).trainer == 1  # never 0
    assert thread_plan(_cfg("run.mode=sync"), ranks=2, cores=8) == ThreadPlan(4, 0, 2)


def test_an_explicit_count_is_kept():
    assert thread_plan(_cfg("run.mode=sync", "policy.torch_threads=3"), cores=8) == ThreadPlan(3, 0)
    assert thread_plan(_cfg("run.mode=async", "policy.torch_threads=1"), cores=8).describe() == (
        "trainer 1 thread + 1 rollout worker × 1")


def test_omp_num_threads_caps_the_cores_counted(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert available_cores() == 1
    assert available_cores(honour_env=False) >= 1
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")
    assert available_cores() == available_cores(honour_env=False)

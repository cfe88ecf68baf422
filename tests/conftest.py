import atexit
import os
import shutil
import tempfile

import pytest
import torch

# One torch thread per process (2 threads slow down many-fold when the other core is busy).
torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# and one thread in every subprocess too (the CLI sets policy.torch_threads, but a worker that waits
# in an OpenMP pool of two spins on the core another test needs)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Threads that wait for work sleep instead of spinning: a warm start builds with its own thread count
# (pretrain.torch_threads, part of its cache key), and two builds of two threads each on two busy
# cores spun at OpenMP's barriers for 125 s where each takes 7 s alone. Waiting policy changes no result.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# No test reads or writes the user's cache (~/.cache/asyncrl, or a developer's $ASYNCRL_CACHE): the
# default-cache runs of this test run share a throwaway one (subprocesses inherit the variable). The
# process that loads this file first (pytest itself, or xdist's controller, which starts its
# workers afterwards) makes it and removes it at exit; xdist workers inherit it, so a warm start is
# built once per run (under its build lock), not once per worker.
_SESSION_CACHE = "_ASYNCRL_TEST_SESSION_CACHE"
if _SESSION_CACHE not in os.environ:
    os.environ[_SESSION_CACHE] = tempfile.mkdtemp(prefix="asyncrl-test-cache-")
    atexit.register(shutil.rmtree, os.environ[_SESSION_CACHE], ignore_errors=True)
os.environ["ASYNCRL_CACHE"] = os.environ[_SESSION_CACHE]


@pytest.fixture(scope="session")
def cache() -> str:
    """The warm-start cache of every end-to-end run (``policy.cache_dir``): the test run's throwaway
    one, so each warm start the runs ask for (the same tiny model, in most) is built once per test
    run, under its build lock, whichever module or xdist worker asks first."""
    return os.environ["ASYNCRL_CACHE"]


@pytest.fixture(scope="session")
def tiny_policy():
    """A randomly initialised 2-layer Qwen2 model + locally trained tokenizer (no download)."""
    from asyncrl.config import ModelConfig
    from asyncrl.policy.model import build_tiny_model
    from asyncrl.policy.tokenizer import train_tokenizer
    from asyncrl.tasks import ArithmeticConfig, ArithmeticTask

    task = ArithmeticTask(ArithmeticConfig(n_train=500, n_eval=50))
    tokenizer = train_tokenizer((p.prompt + p.solution for p in task.problems("train")), 400,
                                split_digits=False)
    model = build_tiny_model(ModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                                         intermediate_size=128), tokenizer, seed=0)
    return model, tokenizer, task


@pytest.fixture()
def policy_and_batch(tiny_policy):
    """(model, 16-completion batch of 4 prompt groups with a reward signal in each); the model's
    weights are restored afterwards."""
    import dataclasses

    from asyncrl.policy.prompts import encode_problems
    from asyncrl.rollout import EngineSpec, make_engine
    from asyncrl.types import Batch

    model, tok, task = tiny_policy
    state = {k: v.clone() for k, v in model.state_dict().items()}
    problems = task.problems("train")[:4]
    engine = make_engine("transformers", EngineSpec(max_new_tokens=8, temperature=1.0), model=model, tokenizer=tok)
    gen = engine.generate(encode_problems(tok, problems, 4))
    rewards = torch.tensor([1.0, 0, 0, 0] * 4)  # signal in every group
    batch = Batch(**{f.name: getattr(gen, f.name) for f in dataclasses.fields(gen)}, rewards=rewards,
                  group_ids=torch.arange(4).repeat_interleave(4), advantages=torch.zeros(16))
    yield model, batch
    model.load_state_dict(state)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_policy):
    """The tiny policy saved as a local HF directory (``policy.model_path`` of subprocess runs)."""
    model, tokenizer, _ = tiny_policy
    path = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


# The modules whose tests run longest (end-to-end runs, a Ray cluster, bench suites) go first: xdist
# hands tests out in order, and a long test handed out last leaves the other workers idle at the end.
LONG_FIRST = ("test_bench_cli.py", "test_ray_backend.py", "test_resume.py", "test_agents_e2e.py", "test_modes_e2e.py",
              "test_eval_cache.py", "test_dataset_e2e.py", "test_torchrun.py", "test_example_loop.py",
              "test_e2e_train.py", "test_any_dataset_e2e.py", "test_orphans.py", "test_watchdog.py",
              "test_run_lock.py", "test_vcpo_trainer.py", "test_peer_trl.py", "test_small_items.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order

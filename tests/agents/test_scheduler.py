"""The episode scheduler: environment and tool calls of different episodes run at the same time
(plain ones in threads, ``async def`` ones on one loop), an episode whose environment answered is
decoded again before a slow one answers, a group is handed on when its last member ends, and
calls that fail are retried, then end their episode, then stop a run whose environment is broken.

No test bounds wall-clock time: a call that should overlap others waits (on a condition, up to a
few seconds) for them to be in flight too; run one after another, the waits time out and the
recorded peak stays 1."""

import asyncio
import threading

import pytest
import torch

from .episode_fakes import chat_tokenizer, LONE_NEWLINE

from asyncrl.agents.calls import CallPool, Failed
from asyncrl.agents.env import EnvError
from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling
from asyncrl.agents.render import PlainTurns
from asyncrl.agents.tools import Tool, ToolBox
from asyncrl.tasks import Problem
from asyncrl.types import Generation

WAIT_S = 3.0  # how long an overlapping call waits for the others (only a failing test waits it out)
CALL = '<tool_call>{"name": "probe", "arguments": {}}</tool_call>'


class ReplyEngine:
    """Answers every row with ``reply(context text)``; records the rows of each call."""

    def __init__(self, tokenizer, reply=lambda text: " go", on_call=None):
        self.tokenizer, self.reply, self.on_call, self.version = tokenizer, reply, on_call, 0
        self.calls: list[list[str]] = []

    def generate(self, prompts, *, between_chunks=None, max_new_tokens=None, stop=()):
        texts = [self.tokenizer.decode(p) for p in prompts]
        self.calls.append(texts)
        if self.on_call is not None:
            self.on_call(texts)
        rows = [self.tokenizer(self.reply(t), add_special_tokens=False)["input_ids"] for t in texts]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id)
        versions = torch.full((len(rows), width), -1)
        for i, r in enumerate(rows):
            ids[i, :len(r)], versions[i, :len(r)] = torch.tensor(r), self.version
        return Generation(prompt_ids=torch.zeros((len(rows), 1), dtype=torch.long),
                          prompt_mask=torch.ones((len(rows), 1), dtype=torch.bool), completion_ids=ids,
                          behav_logp=torch.where(versions >= 0, -0.5, 0.0), versions=versions,
                          completion_mask=versions >= 0)


class Overlap:
    """Counts calls in flight; each waits until ``target`` are in flight (or WAIT_S passes)."""

    def __init__(self, target: int = 16):
        self.target, self.now, self.peak = target, 0, 0
        self.cond = threading.Condition()

    def __enter__(self):
        with self.cond:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.peak >= self.target, timeout=WAIT_S)

    def __exit__(self, *exc):
        with self.cond:
            self.now -= 1


def problems(k: int, prefix: str = "p") -> list[Problem]:
    return [Problem(uid=f"{prefix}{i}", prompt=f"What is {i} + {i}?", answer=str(2 * i), solution="") for i in range(k)]


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer(LONE_NEWLINE)


def play(tok, env, engine, rows, n, *, schedule="ready", tools=None, limits=None, **kwargs):
    limits = limits or EpisodeLimits(max_turns=2, turn_tokens=16, episode_tokens=200, step_timeout_s=30)
    runner = EpisodeRunner(env, PlainTurns(tok), tok, limits, tools, Scheduling(schedule=schedule, **kwargs))
    return runner, runner.run(engine, rows, n)


@pytest.mark.parametrize("schedule", ["ready", "rounds"])
def test_a_32_episode_step_has_16_or_more_environment_calls_in_flight(tok, schedule):
    overlap = Overlap()

    class Slow:
        def reset(self, row):
            return row["prompt"]

        def step(self, action):
            with overlap:
                return "again", 0.0, False, {}

    runner, episodes = play(tok, Slow, ReplyEngine(tok), problems(8), 4, schedule=schedule)
    assert overlap.peak >= 16 and runner.last_run["calls_in_flight_max"] >= 16
    assert [e.end for e in episodes] == ["max_turns"] * 32


def test_async_def_environments_share_one_loop_and_overlap(tok):
    overlap, loops = Overlap(), set()

    class AsyncSlow:
        async def reset(self, row):
            return row["prompt"]

        async def step(self, action):
            loops.add(id(asyncio.get_running_loop()))
            overlap.now += 1  # one loop: no lock needed, and a thread-based wait would block it
            overlap.peak = max(overlap.peak, overlap.now)
            for _ in range(int(WAIT_S / 0.01)):
                if overlap.peak >= overlap.target:
                    break
                await asyncio.sleep(0.01)
            overlap.now -= 1
            return "again", 0.0, False, {}

    _, episodes = play(tok, AsyncSlow, ReplyEngine(tok), problems(8), 4)
    assert overlap.peak >= 16 and len(loops) == 1
    assert all(e.end == "max_turns" for e in episodes)


def test_tool_calls_of_different_episodes_and_of_one_turn_run_at_once(tok):
    overlap = Overlap()

    def probe() -> str:
        """Wait for the other calls.
        """
        with overlap:
            return "ok"

    class Countdown:
        def reset(self, row):
            return row["prompt"]

        def step(self, action):
            return "", 0.0, True, {}

    engine = ReplyEngine(tok, reply=lambda text: " stop" if "<tool_call>" in text else f" {CALL}{CALL}")
    box = ToolBox([Tool.from_function(probe)], timeout_s=30)
    _, episodes = play(tok, Countdown, engine, problems(4), 2, tools=box, limits=EpisodeLimits(3, 64, 400))
    assert overlap.peak >= 16  # 8 episodes × 2 calls of one turn
    assert all(len(e.tool_calls) == 2 and e.end == "done" for e in episodes)


def _fast_and_slow(released: threading.Event, order: list):
    class FastOrSlow:
        def reset(self, row):
            self.slow = row["uid"].startswith("slow")
            return row["prompt"]

        def step(self, action):
            if self.slow:
                released.wait(WAIT_S)
                order.append("slow answered")
            return "again", 0.0, False, {}

    return FastOrSlow


def test_an_episode_whose_environment_answered_is_decoded_again_before_a_slow_one_answers(tok):
    released, order = threading.Event(), []

    def on_call(texts):
        if sum("What is 0 + 0?" in t for t in texts) and len(order) < 3:
            order.append(f"fast decoded ({len(texts)} rows)")
        if len(order) == 3:  # the fast episode's third turn: now let the slow one answer
            released.set()

    engine = ReplyEngine(tok, on_call=on_call)
    rows = [*problems(1), *problems(1, prefix="slow")]
    _, episodes = play(tok, _fast_and_slow(released, order), engine, rows, 1,
                       limits=EpisodeLimits(max_turns=4, turn_tokens=16, episode_tokens=400, step_timeout_s=30))
    assert order[:4] == ["fast decoded (2 rows)", "fast decoded (1 rows)", "fast decoded (1 rows)", "slow answered"]
    assert [e.turns for e in episodes] == [4, 4]


def test_in_rounds_the_fast_episode_waits_for_the_slow_one(tok):
    """The same episodes in lock-step: the fast one's second turn comes only after the slow answer
    (the wait times out: what the ready schedule exists to avoid)."""
    released, order = threading.Event(), []
    engine = ReplyEngine(tok, on_call=lambda texts: order.append(f"decoded ({len(texts)} rows)"))
    rows = [*problems(1), *problems(1, prefix="slow")]
    play(tok, _fast_and_slow(released, order), engine, rows, 1, schedule="rounds",
         limits=EpisodeLimits(max_turns=2, turn_tokens=16, episode_tokens=400, step_timeout_s=30))
    assert order == ["decoded (2 rows)", "slow answered", "decoded (2 rows)", "slow answered"]


def test_a_group_is_handed_on_before_the_batchs_last_episode_ends(tok):
    released, order = threading.Event(), []

    def on_group(index, members):
        order.append(f"group {index}")
        released.set()

    rows = [*problems(1), *problems(1, prefix="slow")]
    limits = EpisodeLimits(max_turns=2, turn_tokens=16, episode_tokens=400, step_timeout_s=30)
    runner = EpisodeRunner(_fast_and_slow(released, order), PlainTurns(tok), tok, limits)
    runner.run(ReplyEngine(tok), rows, 2, on_group=on_group)
    assert order == ["group 0", *["slow answered"] * 4, "group 1"]  # 2 episodes × 2 steps, then their group


class FlakyEvery:
    """Every ``k``-th call of ``step`` (over all instances) raises; the others answer."""

    k = 20
    calls = 0
    lock = threading.Lock()

    def reset(self, row):
        return row["prompt"]

    def step(self, action):
        with FlakyEvery.lock:
            FlakyEvery.calls += 1
            fail = FlakyEvery.calls % self.k == 0
        if fail:
            raise ConnectionError("container went away")
        return "again", 0.0, False, {}


def test_one_call_in_20_failing_is_retried_and_without_retries_ends_episodes_not_the_run(tok):
    FlakyEvery.calls = 0
    runner, episodes = play(tok, FlakyEvery, ReplyEngine(tok), problems(8), 4, backoff_s=0.0,
                            limits=EpisodeLimits(4, 16, 400, step_timeout_s=30))
    assert runner.last_run["call_retries"] >= 4 and not any(e.end == "failed" for e in episodes)
    FlakyEvery.calls = 0
    runner, episodes = play(tok, FlakyEvery, ReplyEngine(tok), problems(8), 4, retries=0,
                            limits=EpisodeLimits(4, 16, 400, step_timeout_s=30))
    failed = [e for e in episodes if e.end == "failed"]
    assert len(failed) >= 4 and all(e.failure == "step raised ConnectionError: container went away" for e in failed)


def test_an_environment_failing_every_call_stops_in_one_line(tok):
    class Down(FlakyEvery):
        k = 1

    with pytest.raises(EnvError) as err:
        play(tok, Down, ReplyEngine(tok), problems(8), 4, retries=1, backoff_s=0.0)
    text = str(err.value)
    assert "\n" not in text and "Down on row uid=" in text
    assert "26 of the last 26 episodes failed, more than env.max_failure_frac=0.25 of env.failure_window=100" in text
    assert text.endswith("the last: step raised ConnectionError: container went away (try 2 of 2)")


def test_the_pool_bounds_calls_in_flight_and_retries_with_backoff():
    overlap, release = Overlap(target=99), threading.Event()
    pool = CallPool(concurrency=3, backoff_s=0.0)

    def held(i):
        with overlap:
            release.wait(WAIT_S)
            return i

    for i in range(5):
        pool.submit(i, held, (i,))
    assert pool.max_in_flight == 3 and len(pool.queued) == 2
    release.set()
    done = []
    while pool.pending:
        done += pool.wait()
    assert sorted(done) == [(i, i) for i in range(5)] and overlap.peak == 3

    tries = []

    def twice_broken():
        tries.append(1)
        if len(tries) < 3:
            raise OSError("busy")
        return "ok"

    pool.submit("x", twice_broken, retries=2)
    assert pool.wait(WAIT_S) == [("x", "ok")] and pool.retried == 2
    pool.submit("y", lambda: exec("raise SystemExit(3)"), retries=0)
    (key, outcome), = pool.wait(WAIT_S)
    assert key == "y" and outcome == Failed("exited (SystemExit 3)")


def test_method_tools_of_one_turn_run_in_order_on_their_instance(tok):
    """An environment's own tool functions (a TRL environment class's methods) share the episode's
    instance: the turn's calls run one after another in the order written (plain tools of one turn
    run at once, above)."""
    from asyncrl.envs.trl import method_tool

    class Counter:
        def __init__(self):
            self.seen, self.busy, self.overlapped = [], False, False

        def add(self, step: int) -> int:
            """Add to the counter.

            Args:
                step: how much to add
            """
            self.overlapped |= self.busy
            self.busy = True
            threading.Event().wait(0.05)  # long enough for a concurrent call to overlap
            self.seen.append(step)
            self.busy = False
            return sum(self.seen)

    class Env:  # what asyncrl.envs.trl.wrap makes of a class: the instance, its tool functions, reset, step
        def __init__(self):
            self.instance = Counter()

        def tool_functions(self):
            return {"add": self.instance.add}

        def reset(self, row):
            return row["prompt"]

        def step(self, action):
            return "", 0.0, True, {}

    call = '<tool_call>{"name": "add", "arguments": {"step": %d}}</tool_call>'
    engine = ReplyEngine(tok, reply=lambda text: " done" if "<tool_call>" in text else "".join(call % k for k in (1, 2, 3)))
    box = ToolBox([method_tool(Counter, "add")], timeout_s=30)
    runner = EpisodeRunner(Env, PlainTurns(tok), tok, EpisodeLimits(3, 64, 400), box)
    episodes = runner.run(engine, problems(2), 2)
    for e in episodes:
        assert e.env.instance.seen == [1, 2, 3] and not e.env.instance.overlapped
        assert [c["content"] for c in e.tool_calls] == ["1", "3", "6"]

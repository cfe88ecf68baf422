"""Episodes as data: an episode's row (asyncrl.agents.records) holds each turn's text and versions,
its tool calls with their results and latency, the environment's answers and rewards, and why it
ended; ``episodes.jsonl`` is written at its steps and cut back on resume; per-tool latency is a
metric and, with the environment's return, a panel of the run report."""

import json

from .episode_fakes import LONE_NEWLINE, Countdown, ScriptedEngine, chat_tokenizer

from asyncrl.agents.envs import FinalAnswer
from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling
from asyncrl.agents.records import MAX_CHARS, episode_record
from asyncrl.agents.render import ChatTurns
from asyncrl.agents.stats import EpisodeStats
from asyncrl.agents.tools import ToolBox
from asyncrl.agents.toolset import load_tools
from asyncrl.runtime.episode_log import FILE, EpisodeLog
from asyncrl.runtime.run_report import logged_panels, signal_panels
from asyncrl.tasks import Problem

PROBLEM = Problem(uid="p0", prompt="What is 12 * 34?", answer="408", solution="", messages=(("user", "What is 12 * 34?"),))
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 34"}}</tool_call>'
LIMITS = EpisodeLimits(max_turns=4, turn_tokens=64, episode_tokens=400)


def _play(env, script, tools=None, version=3):
    tok = chat_tokenizer(LONE_NEWLINE)
    runner = EpisodeRunner(env, ChatTurns(tok), tok, LIMITS, tools, Scheduling(schedule="rounds"))
    engine = ScriptedEngine(tok, [[text] for text in script], version=version)
    episode, = runner.run(engine, [PROBLEM], 1)
    return episode


def test_a_row_holds_the_tool_call_with_its_result_and_the_end_reason():
    episode = _play(FinalAnswer, [CALL, "#### 408"], ToolBox(load_tools(["calculator"])))
    row = json.loads(json.dumps(episode_record(episode, 0.0, 1.0)))  # JSON as written, nothing lost
    assert row["prompt"] == [{"role": "user", "content": "What is 12 * 34?"}]
    first, second = row["turns"]
    call, = first["tool_calls"]
    assert (call["name"], call["arguments"], call["content"], call["failed"]) == \
        ("calculator", {"expression": "12 * 34"}, "408", False)
    assert call["latency_s"] >= 0 and "observation" not in first  # a tool turn: no environment step
    assert first["assistant"] == CALL and first["versions"] == [3, 3] and first["tokens"] > 0
    assert second["assistant"] == "#### 408" and second["done"] is True
    assert row["end"] == "done" and row["reward"] == 1.0 and row["failure"] is None and row["uid"] == "p0"


def test_a_row_holds_the_environments_answers_and_rewards_per_turn():
    episode = _play(Countdown, ["go", "go", "stop"])
    row = episode_record(episode, 1.5, None)
    assert [t.get("reward") for t in row["turns"]] == [0.5, 0.5, 0.5]
    assert [t["observation"] for t in row["turns"][:2]] == [[{"role": "user", "content": "go on"}]] * 2
    assert [t["done"] for t in row["turns"]] == [False, False, True]
    assert row["env_return"] == 1.5 and row["reward"] is None  # None: its group was not trained on


def test_long_texts_are_cut_with_a_marker():
    episode = _play(Countdown, ["stop"])
    episode.turn_log[0]["observation"] = [{"role": "user", "content": "x" * (MAX_CHARS + 10)}]
    text = episode_record(episode, 0.0, 0.0)["turns"][0]["observation"][0]["content"]
    assert text.endswith("…[cut 10 chars]") and len(text) < MAX_CHARS + 20


def test_the_file_is_written_at_its_steps_and_cut_back_on_resume(tmp_path):
    log = EpisodeLog(tmp_path, every=2, last_step=5)
    for step in range(1, 6):
        log.write(step, [{"uid": f"s{step}", "end": "done"}])
    log.close()
    assert [json.loads(line)["step"] for line in (tmp_path / FILE).read_text().splitlines()] == [2, 4, 5]
    resumed = EpisodeLog(tmp_path, every=2, last_step=5, after_step=2)  # a resume from step 2's checkpoint
    resumed.write(3, [{"uid": "x"}])  # not due
    resumed.write(4, [{"uid": "again"}])
    resumed.close()
    assert [json.loads(line)["uid"] for line in (tmp_path / FILE).read_text().splitlines()] == ["s2", "again"]
    EpisodeLog(tmp_path / "none", every=1, last_step=1).write(1, [])  # single completions: no file
    assert not (tmp_path / "none" / FILE).exists()


def test_tool_latency_is_a_metric_and_a_report_panel_with_the_environments_return():
    stats = EpisodeStats()
    stats.add_tool_counts({"calls": {"calculator": 4}, "seconds": {"calculator": 2.0}, "failures": {}})
    other = EpisodeStats()
    other.add_tool_counts({"calls": {"calculator": 1}, "seconds": {"calculator": 3.0}})
    stats.merge(other)
    stats.episodes = 1  # metrics() reports once an episode ran
    stats.lengths = [5]
    assert stats.metrics()["tool/calculator/latency_mean_s"] == 1.0  # (2 + 3) s over 5 calls
    rows = [{"step": s, "episode/env_reward_mean": 0.1 * s, "tool/calculator/latency_mean_s": 0.5,
             "tool/python/latency_mean_s": 1.0} for s in (1, 2)]
    panels = dict(logged_panels(rows, signal_panels({}, rows)))
    assert panels["Tool latency (s per call)"] == [("tool/calculator/latency_mean_s", "calculator"),
                                                   ("tool/python/latency_mean_s", "python")]
    assert panels["Environment's return per episode"][0][0] == "episode/env_reward_mean"
    assert "Tool latency (s per call)" not in dict(logged_panels(rows[:0] or [{"step": 1}], signal_panels({}, [])))

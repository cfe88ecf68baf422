"""Tool calls as models write them, inside episodes: several calls in one turn run at once and their
results reach the model in the order written; Llama 3 and Mistral calls (marked by special tokens)
are parsed from the engine's ids; the stops each format adds; a model that cannot see the tools'
schemas is refused in one line."""

import threading
from types import SimpleNamespace

import pytest

from .episode_fakes import LONE_NEWLINE, ScriptedEngine, chat_tokenizer

from asyncrl.agents.envs import FinalAnswer
from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling
from asyncrl.agents.render import ChatTurns, PlainTurns
from asyncrl.agents.rollout import _tool_format
from asyncrl.agents.tool_formats import FORMATS
from asyncrl.agents.tools import Tool, ToolBox
from asyncrl.core.loader import ConfigError
from asyncrl.tasks import Problem

PROBLEM = Problem(uid="p0", prompt="Add things.", answer="5", solution="", messages=(("user", "Add things."),))
LIMITS = EpisodeLimits(max_turns=3, turn_tokens=200, episode_tokens=600)
LLAMA_TOKENS = ["<|python_tag|>", "<|eom_id|>"]
MISTRAL_TOKENS = ["[TOOL_CALLS]", "[ARGS]"]


def _both_at_once(parties: int = 2):
    """``add`` that returns only once ``parties`` calls are inside it at the same time: run one
    after another, the first waits out the barrier and fails (no wall-clock bound is asserted)."""
    barrier = threading.Barrier(parties, timeout=20)

    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first
            b: the second
        """
        barrier.wait()
        return a + b

    return add


def _episode(tok, script, tools, fmt=None):
    runner = EpisodeRunner(FinalAnswer, ChatTurns(tok, tools.schemas), tok, LIMITS, tools,
                           Scheduling(schedule="rounds"), tool_format=fmt)
    engine = ScriptedEngine(tok, script)
    episode, = runner.run(engine, [PROBLEM], 1)
    return episode, engine


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def test_two_calls_in_one_turn_run_at_once_and_reach_the_model_in_the_order_written():
    tok = chat_tokenizer(LONE_NEWLINE)
    box = ToolBox([Tool.from_function(_both_at_once(), name="add")], timeout_s=30)
    calls = ('<tool_call>{"name": "add", "arguments": {"a": 200, "b": 3}}</tool_call>'
             '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 4}}</tool_call>')
    episode, engine = _episode(tok, [[_ids(tok, calls) + [tok.eos_token_id]], ["#### 5"]], box)
    assert [c["content"] for c in episode.tool_calls] == ["203", "5"]  # both ran: neither waited alone
    assert not any(c["failed"] for c in episode.tool_calls)
    seen = tok.decode(engine.calls[1][0])  # what the model saw before its second turn
    assert seen.index("tool: 203") < seen.index("tool: 5")  # in the order the model wrote the calls
    assert [m["role"] for m in episode.completion_messages] == ["assistant", "tool", "tool", "assistant"]


@pytest.mark.parametrize("fmt, extra, text", [
    ("llama3", LLAMA_TOKENS, '<|python_tag|>{"name": "add", "parameters": {"a": 2, "b": 3}}<|eom_id|>'),
    ("mistral", MISTRAL_TOKENS, '[TOOL_CALLS]add[ARGS]{"a": 2, "b": 3}<|im_end|>'),  # v11: no JSON without the tokens
    ("mistral", MISTRAL_TOKENS, '[TOOL_CALLS][{"name": "add", "arguments": {"a": 2, "b": 3}}]<|im_end|>'),
])
def test_a_call_written_with_special_tokens_is_parsed_and_answered(fmt, extra, text):
    tok = chat_tokenizer(LONE_NEWLINE)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", *extra]})
    box = ToolBox([Tool.from_function(_both_at_once(1), name="add")])
    episode, engine = _episode(tok, [[_ids(tok, text)], ["#### 5"]], box, FORMATS[fmt])
    assert episode.tool_calls[0]["arguments"] == {"a": 2, "b": 3} and episode.tool_calls[0]["content"] == "5"
    assert "tool: 5" in tok.decode(engine.calls[1][0]) and episode.end == "done"
    assert extra[0] not in episode.messages[-3]["content"]  # the conversation keeps the text as decoded


def _env(**keys):
    base = {"tool_format": "auto", "parallel_tool_calls": "auto", "tool_schemas": "template"}
    return SimpleNamespace(**{**base, **keys})


def test_stops_follow_the_format_and_the_calls_per_turn():
    tok = chat_tokenizer(LONE_NEWLINE)
    chat, plain = ChatTurns(tok), PlainTurns(tok)
    assert _tool_format(_env(), tok, chat) == (FORMATS["hermes"], ())  # a chat model ends its own turn
    assert _tool_format(_env(parallel_tool_calls="off"), tok, chat)[1] == ("</tool_call>",)
    # plain prompts: one call per turn, the tiny model's warm-started habit
    assert _tool_format(_env(tool_schemas="none"), tok, plain)[1] == ("</tool_call>",)
    assert _tool_format(_env(tool_schemas="none", parallel_tool_calls="on"), tok, plain)[1] == ()
    tok.chat_template = LONE_NEWLINE + "{# <|python_tag|> #}"
    assert _tool_format(_env(), tok, chat) == (FORMATS["llama3"], ("<|eom_id|>",))
    assert _tool_format(_env(tool_format="mistral"), tok, chat)[0] is FORMATS["mistral"]


def test_a_model_that_cannot_see_the_schemas_is_refused_in_one_line():
    tok = chat_tokenizer(LONE_NEWLINE)
    with pytest.raises(ConfigError) as err:
        _tool_format(_env(), tok, PlainTurns(tok))
    message = str(err.value)
    assert message.startswith("config error: env.tools: ") and "env.tool_schemas=none" in message
    assert "\n" not in message

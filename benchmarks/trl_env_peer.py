"""TRL's ``GRPOTrainer(environment_factory=...)`` on the calculator agent: the peer arm of
``benchmarks/env_latency.sh`` (arm ``trl``), beside asyncrl's sync GRPO and async A-3PO.

    python -m benchmarks.trl_env_peer --config calculator-agent [dotted.key=value ...]

Same config system as ``asyncrl train`` and ``python -m benchmarks.bench.peer_trl`` (whose TRL
options, prompt order and per-step records it reuses); bad input exits 2 with one line on stderr.
Writes ``<run.out_dir>/<run.name>/`` with ``config.yaml``, ``trl_args.json``, ``metrics.jsonl`` (one
record per asyncrl-equivalent step, with the fields ``env_latency_summary.py`` reads) and
``summary.json``, and prints the summary as JSON on the last line of stdout.

What TRL trains on is what asyncrl's calculator agent trains on: the same warm start and
tokenizer, prompts in the same order, 8 prompts × 4 samples a step (from the config), the same
reward (the task's check of the final assistant turn), ``env.max_turns`` assistant turns
(``max_tool_calling_iterations = max_turns − 1``: TRL runs no tool after its last turn, as asyncrl),
``env.turn_tokens`` per turn (``generation_kwargs.max_new_tokens``) and ``env.episode_tokens`` per
episode, observations included (``max_completion_length``). The tool is ``env.tools``' one function
(``calculator``, or ``remote_calculator:calculator``: an HTTP service, see remote_calculator.py),
a method of the environment class (:func:`environment_class`), one instance per episode.

The embedded tiny model has no chat template and writes Hermes calls in plain turns
(asyncrl.agents.render.PlainTurns): ``user: Q\\nassistant: <tool_call>{...}</tool_call>\\ntool:
R\\nassistant: #### N<eos>``. TRL needs a chat template that renders tool calls and a response
parser; it knows neither for this tokenizer. So the TRL side gets a copy of the tokenizer with
 * :data:`CHAT_TEMPLATE`: a Jinja template that renders exactly those plain turns (TRL tokenizes
   the prompt and each tool result with it; both are checked at start-up against asyncrl's ids);
 * :func:`response_template`: transformers' response parser for ``<tool_call>{json}</tool_call>``;
 * the token that ends ``</tool_call>`` (``>``) as an extra end-of-turn id: asyncrl ends a calling
   turn at the stop string ``</tool_call>`` (one call a turn on plain prompts); TRL generates to eos
   only, and transformers' ``stop_strings`` need a tokenizer that TRL does not pass to ``generate``.
   A ``>`` that does not close a call also ends the turn here: counted per step (``stray_stops``).
The model sees the same ids as in asyncrl; nothing of TRL is patched.

Per step (k = TRL optimizer steps (k−1)·n_minibatches+1 .. k·n_minibatches), besides peer_trl's fields:
  tool_time_s, tool_calls, tool_failures   our wall clock and counts around each tool call
  trl_tool_calls, trl_tool_call_frequency, trl_tool_failure_frequency   TRL's own logs
                    (``tools/call_frequency``: calls per sample; × the batch = calls)
  call_stops, stray_stops   turns ended at the closing ``>`` of a call, and at another ``>``
  episode/env_wait_s = tool_time_s (TRL calls tools one after another, every episode waiting),
  episode/decode_s = gen_time_s, train_time_s = step − rollout, trainer_wait_s = rollout_time_s
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from datetime import datetime

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is "experimental" in TRL 1.16

from asyncrl.config import Config  # noqa: E402
from asyncrl.envs.calculator import calculator as builtin_calculator  # noqa: E402

from benchmarks.bench.peer_trl import PeerError, _missing_trl, _PerStep, _time_method, peer_main, trl_options  # noqa: E402

MODE = "trl-grpo-env"
TOOL = "calculator"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

# asyncrl.tasks.chat.render_plain and PlainTurns as a chat template: "role: content\n" per prompt
# message; a tool result "\ntool: content"; "\n" before the assistant's header after a tool result;
# an assistant turn " <tool_call>{json}</tool_call>" (no eos: the turn stopped there) or " content<eos>".
CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- if loop.index0 > 0 and messages[loop.index0 - 1]['role'] == 'tool' %}{{ '\\n' }}{% endif -%}"
    "{{- 'assistant:' -}}"
    "{%- if message['content'] and message['content'] | trim %}{{ ' ' + message['content'] | trim }}{% endif -%}"
    "{%- for call in message.get('tool_calls') or [] -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{{- ' " + CALL_OPEN + "' + ({'name': fn['name'], 'arguments': fn['arguments']} | tojson)"
    " + '" + CALL_CLOSE + "' -}}"
    "{%- endfor -%}"
    "{%- if not message.get('tool_calls') %}{{ eos_token }}{% endif -%}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{- '\\ntool: ' + message['content'] | trim -}}"
    "{%- else -%}"
    "{{- message['role'] + ': ' + message['content'] | trim + '\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{%- if messages and messages[-1]['role'] == 'tool' %}{{ '\\n' }}{% endif -%}"
    "{{- 'assistant:' -}}"
    "{%- endif -%}"
)

def response_template(eos: str) -> dict:
    """transformers' response parser (>= 5.13, TRL 1.16's ``parse_response`` path) for a plain turn:
    the text after the last ``assistant:`` header; each ``<tool_call>`` block is a JSON call, the rest
    (up to eos) is content."""
    return {
        "defaults": {"role": "assistant"},
        "start_anchor": "assistant:",
        "fields": {
            "tool_calls": {"open": CALL_OPEN, "close": CALL_CLOSE, "repeats": True, "content": "json",
                           "transform": {"type": "function", "function": "{content}"}},
            "content": {"close": eos, "content": "text"},
        },
    }


class CalculatorEnv:
    """TRL's environment contract (``reset(**row)``, public methods are tools): one instance per
    episode, whose ``calculator`` calls the run's calculator function (:func:`environment_class`)."""

    _function = None  # the tool's function (env.tools), set on the subclass
    _counts: dict = {}  # the step's accumulators (tool, tool_calls, tool_failures), shared

    def reset(self, **row) -> None:
        return None  # the prompt is the dataset's, as asyncrl's calculator task asks it

    def calculator(self, expression: str) -> str:
        t0 = time.perf_counter()
        counts = type(self)._counts
        counts["tool_calls"] += 1
        try:
            return type(self)._function(expression)
        except Exception:
            counts["tool_failures"] += 1
            raise  # TRL shows the model {"error": ...} and counts a failure
        finally:
            counts["tool"] += time.perf_counter() - t0


CalculatorEnv.calculator.__doc__ = builtin_calculator.__doc__  # the built-in's schema (never shown to the model)


def environment_class(cfg: Config, counts: dict) -> type:
    """The class TRL builds per episode, its ``calculator`` method calling ``env.tools``' only tool
    (its schema, from the built-in's docstring, is never shown: ``env.tool_schemas=none``)."""
    from asyncrl.agents.toolset import load_tools

    tools = load_tools(cfg.env.tools)
    if [t.name for t in tools] != [TOOL]:
        raise PeerError(f"env.tools: the TRL environment peer runs one tool named {TOOL!r}, not "
                        f"{[t.name for t in tools]}")
    env = cfg.env
    if env.tool_schemas != "none" or env.parallel_tool_calls == "on" or env.tool_format not in ("auto", "hermes"):
        raise PeerError("env: the TRL environment peer renders plain turns with one Hermes call a turn "
                        "(env.tool_schemas=none, env.parallel_tool_calls auto/off, env.tool_format auto/hermes)")
    return type("CalculatorEnv", (CalculatorEnv,), {"_function": staticmethod(tools[0].function), "_counts": counts})


def trl_tokenizer(tokenizer):
    """A copy of the policy's tokenizer with the plain-turn chat template and call parser, and the
    id that ends a call (``>``, the last token of ``</tool_call>``)."""
    if getattr(tokenizer, "chat_template", None):
        raise PeerError("the TRL environment peer renders template-free plain turns; this tokenizer has a chat "
                        "template (TRL would render it, asyncrl too: use TRL's own templates there)")
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = CHAT_TEMPLATE
    tok.response_template = response_template(tok.eos_token)
    close = tok(CALL_CLOSE, add_special_tokens=False)["input_ids"]
    if tok.decode(close[-1:]) != ">":
        raise PeerError(f"{CALL_CLOSE!r} does not end in a token of its own ('>'); no end-of-turn id can stand for it")
    return tok, close[-1]


def check_rendering(trainer, plain, problems, close_id: int) -> None:
    """Fail loudly unless TRL tokenizes the prompts and a tool result as asyncrl's PlainTurns does,
    and parses a turn written as the warm start writes calls into that call."""
    from asyncrl.agents.render import PlainTurns
    from asyncrl.envs.calculator import tool_call_text
    from asyncrl.tasks.chat import as_dicts
    from trl.chat_template_utils import parse_response

    turns, tok = PlainTurns(plain), trainer.processing_class
    for p in problems:
        ours = turns.prompt_ids(as_dicts(p.messages))
        theirs = tok.apply_chat_template([as_dicts(p.messages)], tools=trainer.tools, add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"][0]
        if list(map(int, theirs)) != ours:
            raise PeerError(f"TRL tokenizes prompt {p.uid} differently from asyncrl: {list(theirs)[:8]}... "
                            f"vs {ours[:8]}...")
    call = tok(" " + tool_call_text(TOOL, {"expression": "48 * 937"}), add_special_tokens=False)["input_ids"]
    if call[-1] != close_id:
        raise PeerError("a call's last token is not the end-of-turn id chosen for it")
    parsed = parse_response(tok, call, prefix=ours, tools=trainer.tools)
    want = [{"type": "function", "function": {"name": TOOL, "arguments": {"expression": "48 * 937"}}}]
    if parsed.get("tool_calls") != want:
        raise PeerError(f"TRL parses a calculator call as {parsed}")
    result = [{"role": "tool", "name": TOOL, "content": "44976"}]
    if trainer._get_tool_suffix_ids(result) != turns.observation_ids(result, call):
        raise PeerError("TRL renders a tool result with other ids than asyncrl's PlainTurns")


def dataset(cfg: Config, problems: list):
    """The prompts of asyncrl's step k in asyncrl's order (peer_trl's), as conversations."""
    from datasets import Dataset

    from asyncrl.rollout.prompts import PromptStream
    from asyncrl.tasks.chat import as_dicts

    stream = PromptStream(problems, cfg.rollout.prompts_per_step, seed=cfg.run.seed)
    index_of = {id(p): i for i, p in enumerate(problems)}
    return Dataset.from_list([{"prompt": as_dicts(p.messages), "problem_index": index_of[id(p)]}
                              for _ in range(cfg.trainer.steps) for p in stream.next()])


def options(cfg: Config, output_dir: str) -> dict:
    """peer_trl's GRPOConfig options with the episode's limits."""
    env = cfg.env
    return {**trl_options(cfg, output_dir),
            "max_completion_length": env.episode_tokens,  # sampled + tool tokens after the prompt, as asyncrl's
            "max_tool_calling_iterations": env.max_turns - 1,  # max_turns assistant turns
            "generation_kwargs": {"max_new_tokens": env.turn_tokens or cfg.rollout.max_new_tokens}}


def _watch_stops(trainer, tok, close_id: int, counts: dict, strays: list) -> None:
    """Count the turns that ended at ``>``: closing a call (asyncrl's stop) or not (a stray stop,
    where asyncrl's turn would go on; the first few kept in ``strays``)."""
    method = trainer._generate_single_turn

    def watched(*args, **kwargs):
        ids, logps = method(*args, **kwargs)
        for seq in ids:
            if seq and seq[-1] == close_id:
                text = tok.decode(seq)
                key = "call_stops" if text.endswith(CALL_CLOSE) else "stray_stops"
                counts[key] += 1
                if key == "stray_stops" and len(strays) < 5:
                    strays.append(text)
        return ids, logps

    trainer._generate_single_turn = watched


class StepFields:
    """``_PerStep``'s extra fields of a step (see the module docstring); keeps the step times."""

    def __init__(self, batch: int):
        self.batch, self.step_times = batch, []

    def __call__(self, record: dict, logs: dict, counts: dict) -> dict:
        self.step_times.append(record["step_time_s"])
        frequency = logs.get("tools/call_frequency")
        return {
            "batch_samples": self.batch,
            "tool_time_s": counts["tool"], "tool_calls": int(counts["tool_calls"]),
            "tool_failures": int(counts["tool_failures"]),
            "trl_tool_call_frequency": frequency,
            "trl_tool_calls": None if frequency is None else round(frequency * self.batch),
            "trl_tool_failure_frequency": logs.get("tools/failure_frequency"),
            "call_stops": int(counts["call_stops"]), "stray_stops": int(counts["stray_stops"]),
            "episode/env_wait_s": counts["tool"], "episode/decode_s": counts["gen"],
            "train_time_s": record["step_time_s"] - counts["rollout"], "trainer_wait_s": counts["rollout"],
        }

    def samples_per_s_after_first(self) -> float | None:
        """Samples per second over steps 2..N (start-up excluded), as env_latency_summary.py counts them."""
        later = self.step_times[1:]
        return self.batch * len(later) / sum(later) if later and sum(later) > 0 else None


def run(cfg: Config) -> dict:
    """Train with TRL's GRPOTrainer and its tool loop inside an asyncrl session (model, task, metrics, summary)."""
    try:
        import trl
        from trl import GRPOConfig
    except ImportError:
        raise PeerError(_missing_trl()) from None
    import torch
    from transformers import PrinterCallback

    from asyncrl.config.threads import trainer_threads
    from asyncrl.core.progress import TrainProgress
    from asyncrl.runtime.evaluate import Evaluations
    from asyncrl.runtime.loop import open_session
    from asyncrl.tasks.chat import completion_text

    cfg.run.mode = "sync"  # TRL is one process: asyncrl's sync mode gives it every core
    threads = trainer_threads(cfg)
    torch.set_num_threads(threads)
    steps = cfg.trainer.steps
    if cfg.run.name is None:
        cfg.run.name = f"{MODE}-s{cfg.run.seed}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    counts = {"gen": 0.0, "rollout": 0.0, "tool": 0.0, "tool_calls": 0, "tool_failures": 0,
              "call_stops": 0, "stray_stops": 0}
    env_class = environment_class(cfg, counts)
    session = open_session(cfg)
    evaluations = Evaluations(session)
    session.progress = TrainProgress(steps, MODE, enabled=cfg.run.progress)
    tok, close_id = trl_tokenizer(session.tokenizer)
    step_rewards: list[list[float]] = []
    strays: list[str] = []

    def task_reward(prompts, completions, problem_index, **_) -> list[float]:
        finals = [completion_text(c) for c in completions]  # the final assistant turn, as asyncrl scores episodes
        rewards = session.rewards.totals(finals, [session.train_problems[i] for i in problem_index])
        step_rewards.append(rewards)
        return rewards

    args = options(cfg, str(session.run_dir / "trl"))
    (session.run_dir / "trl_args.json").write_text(json.dumps({"trl_version": trl.__version__, **args}, indent=2))
    fields = StepFields(cfg.rollout.batch_size)
    callback = _PerStep(session, evaluations, step_rewards, counts, extra=fields)
    train_wall = 0.0
    with session.progress as progress:
        progress.update(0, eval_acc=evaluations.run(0), elapsed_s=session.elapsed_s())
        if steps > 0:
            trainer = build_trainer(session.model, tok, close_id, env_class, task_reward, GRPOConfig(**args),
                                    dataset(cfg, session.train_problems), [callback])
            trainer.remove_callback(PrinterCallback)
            torch.set_num_threads(threads)
            check_rendering(trainer, session.tokenizer, session.train_problems[:64], close_id)
            _watch_stops(trainer, tok, close_id, counts, strays)
            _time_method(trainer, "_generate_single_turn", counts, "gen")
            _time_method(trainer, "_generate_and_score_completions", counts, "rollout")
            t0 = time.perf_counter()
            trainer.train()
            train_wall = time.perf_counter() - t0 - evaluations.seconds
            if callback.written != steps:
                raise RuntimeError(f"trl_env_peer: {callback.written} steps recorded, expected {steps}")
    totals, n = callback.totals, max(steps, 1)
    return session.finish(steps, evaluations.summary(), {
        "mode": MODE, "loss": "trl-bnpo", "prox": None, "trl_version": trl.__version__,
        "torch_threads": callback.threads_seen or threads, "tool": cfg.env.tools[0],
        "samples_per_s_after_first": fields.samples_per_s_after_first(),
        "gen_time_per_step_s": totals["gen"] / n, "rollout_time_per_step_s": totals["rollout"] / n,
        "tool_time_per_step_s": totals["tool"] / n, "tool_calls": int(totals["tool_calls"]),
        "tool_failures": int(totals["tool_failures"]), "call_stops": int(totals["call_stops"]),
        "stray_stops": int(totals["stray_stops"]), "stray_stop_examples": strays,
    }, train_wall)


def build_trainer(model, tok, close_id: int, env_class: type, reward, args, data, callbacks=()):
    """The GRPOTrainer, built while the model's generation config also ends a turn at ``close_id``
    (TRL reads its end-of-turn ids there, once)."""
    from trl import GRPOTrainer

    config = model.generation_config
    eos = config.eos_token_id
    config.eos_token_id = [*([] if eos is None else eos if isinstance(eos, list) else [eos]), close_id]
    try:
        return GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=data, processing_class=tok,
                           environment_factory=env_class, callbacks=list(callbacks))
    finally:
        config.eos_token_id = eos


def main(argv: list[str] | None = None) -> int:
    return peer_main("python -m benchmarks.trl_env_peer", "YAML config file or preset (calculator-agent)", run, argv)


if __name__ == "__main__":
    sys.exit(main())

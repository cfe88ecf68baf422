"""Multi-turn episodes: ``env.*`` (docs/agents.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from asyncrl.core.loader import setting

NO_ENV = "none"  # env.name of single-turn runs: one prompt, one completion (asyncrl.agents re-exports it)


@dataclass
class EnvConfig:
    """The environment an episode runs in, its tools and its limits. ``none`` with no tools: one
    completion per prompt (single turn); ``none`` with tools: the ``answer`` environment (the episode
    ends at the first turn that calls no tool)."""

    name: str = setting(NO_ENV, "environment: none (single turn), answer, guess, rg_retry, gem:<GEM id>, or a "
                                "plugin's (asyncrl.agents.ENVIRONMENTS)", names="asyncrl.agents:ENVIRONMENTS",
                                also=(NO_ENV,))
    factory: str = setting("", "an environment class written for TRL's environment_factory, "
                               "'module:Class' or 'path/to/file.py:Class': reset(**row), public methods as "
                               "tools, get_reward (docs/agents.md)")
    harness: str = setting("", "your own agent loop over an OpenAI client, 'module:function' or "
                               "'path/to/file.py:function': called once per episode with a session (base_url, "
                               "api_key, row); its requests to the run's endpoint are the episode's turns "
                               "(docs/harness.md)")
    endpoint_host: str = setting("127.0.0.1", "where the harness endpoint listens; anything but a loopback "
                                              "address serves the policy to your network (docs/harness.md)")
    endpoint_port: int = setting(0, "the harness endpoint's port; 0 = a free one, per rollout process")
    history: Literal["tokens", "template"] = setting(
        "tokens", "what later turns see of earlier ones: tokens (the sampled ids as they are, token-in/"
                  "token-out) or template (the conversation as the chat template renders it, as a deployed "
                  "model sees it; where that rewrites earlier turns, e.g. drops <think> blocks, the episode "
                  "forks a new row)")
    kwargs: dict[str, Any] = setting(help="keyword arguments of the environment's constructor", factory=dict)
    tools: list[str] = setting(help="tools the model may call: calculator, python, or import paths "
                                    "module:function (typed, with a docstring)", factory=list)
    max_turns: int = setting(4, "assistant turns per episode at most")
    turn_tokens: int = setting(0, "tokens per assistant turn at most; 0 = rollout.max_new_tokens")
    episode_tokens: int = setting(192, "tokens after the prompt per episode at most (sampled + observed)")
    stop: list[str] = setting(help="strings that end an assistant turn (with eos and the environment's "
                                   "own; tools add their call format's)", factory=list)
    turn_discount: float = setting(1.0, "γ of the environment's per-turn rewards: Σ γ^(t-1) r_t")
    tool_timeout_s: float = setting(10.0, "seconds a tool call may take before it is an error observation")
    tool_max_chars: int = setting(2000, "a tool's result is cut to this many characters")
    tool_format: Literal["auto", "hermes", "llama3", "mistral"] = setting(
        "auto", "how the model writes tool calls: hermes (<tool_call>{...}</tool_call>: Qwen, Hermes), llama3 "
                "(<|python_tag|>{...}), mistral ([TOOL_CALLS]...); auto reads the tokenizer's chat template")
    parallel_tool_calls: Literal["auto", "on", "off"] = setting(
        "auto", "on: a turn may make several calls, run at once, results in the order written; off: a turn "
                "ends at its first call; auto: on with a chat template, off with plain prompts")
    tool_schemas: Literal["template", "none"] = setting(
        "template", "how the model learns the tools: template (the chat template shows their schemas; a "
                    "policy without one is refused) or none (not shown: the task's warm start demonstrates the calls)")
    python_sandbox: Literal["bubblewrap", "none"] = setting(
        "bubblewrap", "where the python tool runs model-written code: bubblewrap (a sandbox; the tool is "
                      "refused where it cannot start) or none (unsandboxed, as your user: docs/security.md)")
    step_timeout_s: float = setting(60.0, "seconds an environment's reset or step may take (then it is retried)")
    schedule: Literal["ready", "rounds"] = setting("ready", "ready: the engine decodes whichever episodes' environments have answered, "
                                     "never waiting for the slowest; rounds: every live episode's turn in one "
                                     "engine call (lock-step, reproducible to the bit)")
    concurrency: int = setting(256, "environment and tool calls in flight at most, per rollout process")
    retries: int = setting(2, "tries after a reset or step that raised or timed out, before its episode fails")
    retry_backoff_s: float = setting(1.0, "seconds before the first retry; doubled for each next one")
    max_failure_frac: float = setting(0.25, "the run stops once more than this share of the last "
                                            "env.failure_window episodes failed (their groups are dropped)")
    failure_window: int = setting(100, "episodes over which env.max_failure_frac is counted")

    @property
    def episodes(self) -> bool:
        """Whether the run plays episodes (an environment or tools), not single completions."""
        return self.name != NO_ENV or bool(self.tools) or bool(self.factory) or bool(self.harness)

    @property
    def environment(self) -> str:
        """The environment episodes run in: ``name``, or ``answer`` for tools alone."""
        return "answer" if self.name == NO_ENV else self.name

    def validate(self) -> None:
        if self.max_turns < 1:
            raise ValueError("max_turns: must be >= 1")
        if self.turn_tokens < 0:
            raise ValueError("turn_tokens: must be >= 0")
        if self.episode_tokens < 1:
            raise ValueError("episode_tokens: must be >= 1")
        if not 0 < self.turn_discount <= 1:
            raise ValueError("turn_discount: must be in (0, 1]")
        if self.concurrency < 1:
            raise ValueError("concurrency: must be >= 1")
        if self.retries < 0:
            raise ValueError("retries: must be >= 0")
        if self.retry_backoff_s < 0:
            raise ValueError("retry_backoff_s: must be >= 0")
        if not 0 <= self.max_failure_frac <= 1:
            raise ValueError("max_failure_frac: must be in [0, 1]")
        if self.failure_window < 1:
            raise ValueError("failure_window: must be >= 1")
        for key in ("tool_timeout_s", "step_timeout_s"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key}: must be > 0")
        if self.tool_max_chars < 1:
            raise ValueError("tool_max_chars: must be >= 1")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError("stop: must be non-empty strings")
        if self.harness and (self.name != NO_ENV or self.factory or self.tools):
            raise ValueError("harness: the harness is the environment and runs its own tools; it does not go "
                             "with env.name, env.factory or env.tools")
        if self.harness and not 0 <= self.endpoint_port < 65536:
            raise ValueError("endpoint_port: must be in [0, 65535]")
        if self.factory and self.name != NO_ENV:
            raise ValueError(f"factory: is the environment itself; it does not go with env.name={self.name}")
        # the tools, the factory and the harness are loaded (or their paths made absolute) by
        # asyncrl.runtime.validate


def check_episode_budget(env: EnvConfig, max_new_tokens: int) -> None:
    """An episode's budget holds at least one whole turn: smaller, every episode would be cut in its
    first turn and train on a fragment."""
    turn = env.turn_tokens or max_new_tokens
    if env.episodes and env.episode_tokens < turn:
        where = f"env.turn_tokens={env.turn_tokens}" if env.turn_tokens else f"rollout.max_new_tokens={max_new_tokens}"
        raise ValueError(f"env.episode_tokens: {env.episode_tokens} is less than one turn ({where}); every episode "
                         "would be cut in its first turn: raise it, or lower the turn's limit")


def check_tool_schemas(env: EnvConfig, policy) -> None:
    """Tools whose schemas the model would never see are refused at load where that is known
    without the model: the embedded tiny model has no chat template, ``policy.chat_template=false``
    shows none. (A checkpoint whose tokenizer has none is refused once it loads.)"""
    if not (env.tools or env.factory) or env.tool_schemas != "template":
        return
    why = ("the embedded tiny model has no chat template" if policy.model_path is None
           else "policy.chat_template=false" if not policy.chat_template else None)
    if why is not None:
        raise ValueError(f"env.tool_schemas: template, but {why} to show the tools' schemas in; the model would "
                         "never see them. Use a policy with a chat template, or env.tool_schemas=none where the "
                         "task's warm start demonstrates the calls")

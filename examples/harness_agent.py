"""An agent written against the OpenAI client, trained as it is (docs/harness.md).

Nothing here knows about asyncrl's environments: it is the loop any tool-using agent runs — ask the
model, run the tool calls it makes, send back their results, until it answers. asyncrl calls
``agent(session)`` once per episode; ``session.base_url`` and ``session.api_key`` point the client
at the run's endpoint, where every request is one turn of the episode, sampled by the policy being
trained and recorded token for token. ``session.row`` is the dataset row (here the calculator
task's: ``prompt`` holds the question's messages).

Train it on the embedded tiny model (the calculator task's warm start shows the model the calls):

    asyncrl train --config calculator-agent env.tools=[] env.harness=examples/harness_agent.py:agent
    asyncrl train --config calculator-agent env.tools=[] env.harness=examples/harness_agent.py:agent run.mode=sync

The reward is the task's (the final answer's ``#### N`` checked); return a number, or call
``session.reward(x)``, to give the episode a reward of the harness's own.
"""

from __future__ import annotations

import json

from openai import OpenAI

from asyncrl.envs.calculator import calculator  # any implementation of the tool would do

TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]
MAX_TURNS = 3


def run_tool(call) -> str:
    try:
        arguments = json.loads(call.function.arguments)
        return calculator(**arguments) if call.function.name == "calculator" else f"unknown tool {call.function.name}"
    except Exception as err:  # the model's bad call is an observation for it, not the harness's crash
        return f"error: {err}"


def agent(session) -> None:
    client = OpenAI(base_url=session.base_url, api_key=session.api_key, max_retries=0)
    messages = list(session.row["prompt"])
    for _ in range(MAX_TURNS):
        reply = client.chat.completions.create(model=session.model, messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return None  # answered: the task's reward function scores the final message
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": run_tool(call)})
    return None

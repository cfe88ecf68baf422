"""A game played by an agent loop over the OpenAI client, trained as it is (docs/harness.md).

The harness owns the game: it asks the model for a guess, answers "higher" or "lower" with the range
still possible, and asks again, until the model finds the number or runs out of turns. Its return
value is the episode's reward: 0.8^(t-1) for finding the number at turn t, else 0. Nothing here knows
about asyncrl's environments; asyncrl calls ``agent(session)`` once per episode, and every request
the client sends to ``session.base_url`` is one turn, sampled by the policy being trained and
recorded token for token. ``session.row`` is the dataset row of the ``guess`` task: ``prompt`` holds
the question's messages, ``answer`` the secret.

Train it on the embedded tiny model (the guess task's warm start shows the game's format; only a
third of its games use the feedback):

    asyncrl train --config guess-agent env.name=none env.harness=examples/harness_guess.py:agent
    asyncrl train --config guess-agent env.name=none env.harness=examples/harness_guess.py:agent run.mode=sync
"""

from __future__ import annotations

import re

from openai import OpenAI

LOW, HIGH = 1, 20  # the guess task's range
MAX_TURNS = 5
DISCOUNT = 0.8  # finding the number at turn t scores DISCOUNT ** (t - 1)
GUESS = re.compile(r"<guess>\s*(-?\d{1,6})")


def agent(session) -> float:
    client = OpenAI(base_url=session.base_url, api_key=session.api_key, max_retries=0)
    secret, low, high = int(session.row["answer"]), LOW, HIGH
    messages = list(session.row["prompt"])
    for turn in range(MAX_TURNS):
        # the stop string ends the turn at its guess; the answer comes back without it
        reply = client.chat.completions.create(model=session.model, messages=messages, stop=["</guess>"])
        text = reply.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        match = GUESS.search(text)
        if match is None:
            messages.append({"role": "user", "content": f"no guess read; write <guess>N</guess> from {low} to {high}"})
            continue
        guess = int(match.group(1))
        if guess == secret:
            return DISCOUNT ** turn
        if guess < secret:
            low = max(low, guess + 1)
            messages.append({"role": "user", "content": f"higher: {low} to {high}"})
        else:
            high = min(high, guess - 1)
            messages.append({"role": "user", "content": f"lower: {low} to {high}"})
    return 0.0

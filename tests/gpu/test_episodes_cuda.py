"""Episodes on CUDA: the transformers engine plays turns on the GPU (stop strings checked there)
and the trainer's log-probs of the episode, observations attended, equal the engine's."""

import pytest
import torch

from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, episodes_to_generation
from asyncrl.agents.render import PlainTurns
from asyncrl.tasks import Problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


class Twice:
    def reset(self, row):
        return row["prompt"]

    def step(self, action):
        return "again", 0.0, False, {}


def test_episode_on_cuda_matches_the_trainers_logprobs(tiny_policy):
    from asyncrl.policy.logprobs import completion_logprobs
    from asyncrl.rollout import EngineSpec, make_engine

    model, tok, _ = tiny_policy
    model = model.to("cuda").eval()
    try:
        engine = make_engine("transformers", EngineSpec(max_new_tokens=8, temperature=1.0, seed=0, device="cuda"),
                             model=model, tokenizer=tok)
        runner = EpisodeRunner(Twice, PlainTurns(tok), tok, EpisodeLimits(max_turns=3, turn_tokens=8,
                                                                           episode_tokens=200, stop=("=",)))
        problem = Problem(uid="p", prompt="2 + 3", answer="5", solution="", messages=(("user", "2 + 3"),))
        episodes = runner.run(engine, [problem], 4)
        gen = episodes_to_generation(episodes, tok.pad_token_id).to("cuda")
        with torch.no_grad():
            logp, _ = completion_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids,
                                          gen.completion_mask, completion_attn=gen.completion_attention)
        mask = gen.completion_mask
        assert gen.observation_mask.any()
        assert (logp - gen.behav_logp)[mask].abs().max() < 1e-3
    finally:
        model.to("cpu")

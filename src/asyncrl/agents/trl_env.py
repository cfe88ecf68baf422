"""Where the TRL adapter lived, kept as an import path: ``asyncrl.agents.trl_env:get_reward`` is the
documented reward function of ``env.factory`` runs (docs/agents.md), which run configs hold in
``reward.funcs``, saved ones included, so their resumes find it. The adapter is asyncrl.envs.trl;
this module re-exports the names it had and holds nothing of its own."""

from asyncrl.envs.trl import (GET_REWARD, RESERVED, TrlEnvironment, environment_class, get_reward, inspect_factory,
                              load_factory, method_tools, tool_names, wrap)

__all__ = ["GET_REWARD", "RESERVED", "TrlEnvironment", "environment_class", "get_reward", "inspect_factory",
           "load_factory", "method_tools", "tool_names", "wrap"]

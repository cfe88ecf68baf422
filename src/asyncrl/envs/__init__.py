"""The integrations asyncrl ships, one file each: a task's rows, its environment, its reward and
the demonstrations its warm start learns from, together.

* ``guess.py``: guess the number (tasks ``guess``, ``guess_tail``; environment ``guess``);
* ``calculator.py``: arithmetic with the ``calculator`` tool (task ``calculator``; the tool);
* ``gem.py``: GEM's offline games (environments ``gem:<id>``; task ``gem``; scripted experts);
* ``reasoning_gym.py``: reasoning-gym's datasets (task ``reasoning_gym``; environment ``rg_retry``);
* ``trl.py``: TRL's ``environment_factory`` classes (``env.factory``; the reward ``get_reward``).

They are built on the task types (asyncrl.tasks) and the episode engine (asyncrl.agents), which never
import them: the registries name their entries by import path (``"asyncrl.envs.guess:GuessNumber"``
in asyncrl.agents.ENVIRONMENTS, ``"asyncrl.envs.guess:GuessTask"`` in asyncrl.tasks.TASKS), and a
process imports an integration when a run builds one of its parts. This package's ``__init__``
imports nothing.
"""

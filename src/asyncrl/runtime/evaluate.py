"""The run's evaluations on the held-out problems: step 0 (before training; cached across runs
with ``eval.cache_initial``), every ``eval.every`` steps and the last step. Their results make the
summary's eval history; their seconds after step 0 are left out of the training loop's wall time.

Where the batch source holds a rollout engine in this process that can generate at other sampling
settings (its ``eval_engine()``: vLLM in sync and simulated modes), evaluation generates through it
with the newest weights; otherwise (the transformers engine, or async mode, whose engines are in other
processes) with the trained model on the trainer's device."""

from __future__ import annotations

import time

from asyncrl.runtime.eval_cache import cache_path, initial_eval_key
from asyncrl.runtime.eval_cache import load as load_cached_eval
from asyncrl.runtime.eval_cache import store as store_cached_eval
from asyncrl.runtime.session import Session
from asyncrl.runtime.timing import due
from asyncrl.training.evaluation import eval_metrics


class Evaluations:
    """Evaluates the session's model when due; keeps what the summary and a resumed run need."""

    def __init__(self, session: Session):
        self.session = session  # the model, the eval problems, the rewards, the metrics file
        self.history: list[tuple[int, float]] = []  # (step, eval_reward)
        # eval_answer_acc per evaluation (tasks that can judge an answer whatever its format)
        self.answer_acc_history: list[tuple[int, float]] = []
        self.seconds = 0.0  # evaluation seconds after step 0
        self.last: dict[str, float] = {}  # every metric of the latest evaluation (pass@k too)
        self.source = None  # the batch source, asked for an engine at each evaluation (None: none)

    def generate_with(self, source) -> None:
        """Evaluate through ``source.eval_engine()`` when it has one (asyncrl.runtime.sources)."""
        self.source = source

    def _engine(self):
        """The source's engine for evaluation, with the newest weights; None = the trained model's."""
        ask = getattr(self.source, "eval_engine", None)
        return None if ask is None else ask()

    def due(self, step: int) -> bool:
        """Whether to evaluate after ``step`` (never without eval problems: eval.n_problems=0)."""
        return bool(self.session.eval_problems) and due(step, self.session.cfg.eval.every, self.session.cfg.trainer.steps)

    def run_if_due(self, step: int, record: dict) -> None:
        """Evaluate after ``step`` if due, into the step's record."""
        if self.due(step):
            self.run(step)
            record.update(self.last)

    def run(self, step: int) -> float | None:
        """Evaluate now; returns ``eval_reward`` (None for a run without evaluation: eval.n_problems=0).
        Step 0 writes its own row, so that curves start where the policy started."""
        t0 = time.perf_counter()
        session = self.session
        if not session.eval_problems:
            self.last = {}
            return None
        if step == 0 and session.cfg.eval.cache_initial:
            self.last = self._initial_cached()
        else:
            self.last = self._metrics(self._engine())
        acc = self.last["eval_reward"]
        self.history.append((step, acc))
        if "eval_answer_acc" in self.last:
            self.answer_acc_history.append((step, self.last["eval_answer_acc"]))
        if step > 0:
            self.seconds += time.perf_counter() - t0
        else:
            session.metrics.write(0, {**self.last, "elapsed_s": session.elapsed_s()})
        return acc

    def _metrics(self, engine=None) -> dict[str, float]:
        s = self.session
        metrics, _ = eval_metrics(s.model, s.tokenizer, s.task, s.eval_problems, s.cfg, rewards=s.rewards,
                                  engine=engine)
        return metrics

    def _initial_cached(self) -> dict[str, float]:
        """The step-0 metrics from the cache, computed and stored on a miss; the key names the
        rollout engine when evaluation generates through one."""
        s = self.session
        engine = self._engine()
        key = initial_eval_key(s.cfg, s.model, s.eval_problems, engine=None if engine is None else s.cfg.rollout.engine)
        path = cache_path(s.cfg, key)
        cached = load_cached_eval(path)
        if cached is not None:
            return cached
        metrics = self._metrics(engine)
        store_cached_eval(path, metrics)
        return metrics

    def summary(self) -> dict:
        initial, final = _first_and_last(self.history)
        initial_answer, final_answer = _first_and_last(self.answer_acc_history)
        return {"initial_eval_reward": initial, "final_eval_reward": final, "eval_history": self.history,
                "initial_eval_answer_acc": initial_answer, "final_eval_answer_acc": final_answer}

    def state_dict(self) -> dict:
        return {"eval_history": [[s, a] for s, a in self.history],
                "answer_acc_history": [[s, a] for s, a in self.answer_acc_history], "eval_time_s": self.seconds}

    def load_state_dict(self, state: dict) -> None:
        self.history = [(int(s), float(a)) for s, a in state["eval_history"]]
        self.answer_acc_history = [(int(s), float(a)) for s, a in state.get("answer_acc_history", [])]
        self.seconds = float(state["eval_time_s"])


def _first_and_last(history: list[tuple[int, float]]) -> tuple[float | None, float | None]:
    return (history[0][1], history[-1][1]) if history else (None, None)

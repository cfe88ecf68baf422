"""TRL's ``environment_factory`` datasets as TRL's scripts write them: rows that share one prompt
(the environment's ``reset`` brings the problem) train through ``asyncrl.train``, their eval split
made by row, or without evaluation."""

import pytest

from .test_trl_env import SMALL, _metrics, run_script



SHARED = [{"prompt": [{"role": "system", "content": "Count with the tools."}], "target": str(3 + i % 2)}
          for i in range(16)]  # TRL's scripts: one system message for every row; reset brings the problem


@pytest.mark.parametrize("evaluation", ["split by row", "none"])
def test_rows_that_share_one_prompt_train_through_the_api(tmp_path, model_dir, evaluation):
    """A dataset whose rows share their prompt (TRL's environment_factory scripts): the eval split
    goes by row (by prompt text every row would land on one side), or there is none to make."""
    import yaml

    overrides = {k: yaml.safe_load(v) for k, v in (p.split("=", 1) for p in SMALL)}
    if evaluation == "none":
        overrides.update({"eval.n_problems": 0, "task.eval_fraction": 0.0})
    proc = run_script(tmp_path, model_dir, SHARED, overrides, modes=("sync",))
    assert "SUMMARY 2 sync" in proc.stdout
    records = _metrics(tmp_path / "runs" / "sync")
    evaluated = [r for r in records if "eval_reward" in r]
    assert (len(evaluated) == 2) if evaluation == "split by row" else not evaluated


def test_the_eval_split_goes_by_row_when_one_prompt_fills_most_of_the_file():
    from asyncrl.tasks.datasets import _split_keys

    assert _split_keys(["a", "b", "a"]) == ["row 0", "row 1", "row 2"]
    assert _split_keys(["a", "b", "a", "c"]) == ["a", "b", "a", "c"]  # duplicates of a question: one side
    assert _split_keys(["a"]) == ["a"] and _split_keys([]) == []

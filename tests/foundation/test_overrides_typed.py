"""``dotted.key=value`` overrides are read by the type of the field they set: text stays text for
a string field, a list takes ``a,b`` or ``[a, b]``, everything else reads as YAML."""

from __future__ import annotations

import json

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from asyncrl.config import Config, ConfigError, load_config
from asyncrl.core.loader import field_type, parse_override, read_yaml
from asyncrl.config.presets import preset_names, resolve_config_path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Inner:
    text: str = "x"


@dataclass
class Sample:
    text: str = "x"
    maybe_text: str | None = None
    choice: Literal["no", "yes", "auto"] = "auto"
    count: int = 0
    maybe_count: int | None = None
    rate: float = 0.0
    flag: bool = False
    names: list[str] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    weights: list[float] | None = None
    mapping: dict[str, Any] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)
    async_: int = 0


def _value(text: str) -> Any:
    return parse_override(text, Sample)[1]


@pytest.mark.parametrize("override, expected", [
    # a string field: the text as given, never YAML
    ("text={question}", "{question}"),
    ("text=Q: {question} A:", "Q: {question} A:"),
    ("text=[not, a, list]", "[not, a, list]"),
    ("text=true", "true"),
    ("text=0.5", "0.5"),
    ("text=path/to/f.py:fn", "path/to/f.py:fn"),
    ("text=", ""),
    ("text=a=b", "a=b"),  # only the first '=' splits key from value
    # a whole quoted scalar, as --help and `asyncrl config` write such defaults: unquoted
    ('text="Q: {question}\\nA:"', "Q: {question}\nA:"),
    ("text='no'", "no"),
    ("text='it''s'", "it's"),
    ("text=\"half", "\"half"),
    ("text='a' + 'b'", "'a' + 'b'"),
    ('choice="no"', "no"),
    # a string choice: "no" is not YAML's false
    ("choice=no", "no"),
    ("choice=yes", "yes"),
    # str | None: null is None, anything else is text
    ("maybe_text=null", None),
    ("maybe_text=~", None),
    ("maybe_text={question}", "{question}"),
    # lists: a,b or the YAML [a, b]; items read by the item type
    ("names=path/to/f.py:fn", ["path/to/f.py:fn"]),
    ("names=a.b:f, c:g", ["a.b:f", "c:g"]),
    ("names=[a:b, c:d]", ["a:b", "c:d"]),
    ("names=[]", []),
    ("names=", []),
    ("counts=1,4", [1, 4]),
    ("counts=[1, 4]", [1, 4]),
    ("counts=8", [8]),
    ("weights=1,0.5", [1, 0.5]),
    ("weights=[0.25]", [0.25]),
    ("weights=null", None),
    # numbers, booleans, None, mappings: YAML as before
    ("count=3", 3),
    ("maybe_count=null", None),
    ("maybe_count=7", 7),
    ("rate=1e-5", 1e-5),
    ("flag=true", True),
    ("flag=false", False),
    ("mapping={a: 1, b: x}", {"a": 1, "b": "x"}),
    ("inner={text: y}", {"text": "y"}),
    ("inner.text=a: b", "a: b"),
    ("async=2", 2),
])
def test_value_is_read_by_the_field_type(override, expected):
    assert _value(override) == expected


def test_unknown_keys_and_keys_inside_mappings_read_as_yaml():
    assert field_type(Sample, ["nope"]) is None
    assert field_type(Sample, ["mapping", "a"]) is None
    assert _value("nope=[1, 2]") == [1, 2]
    assert _value("mapping.a=0.3") == 0.3
    assert parse_override("text={a: 1}")[1] == {"a": 1}  # no root: YAML, as for resume's key check


def test_field_type_follows_sections_and_keyword_names():
    assert field_type(Sample, ["inner", "text"]) is str
    assert field_type(Sample, ["async"]) is int
    assert field_type(Config, ["async", "max_ahead"]) == int | None
    assert field_type(Config, ["eval", "pass_k"]) == list[int]


@pytest.mark.parametrize("override, key", [
    ("counts=[1,", "counts"),
    ("mapping={a: [", "mapping"),
])
def test_unreadable_values_are_one_line_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        _value(override)
    assert err.value.key == key and "\n" not in str(err.value)


def test_the_issue_examples_load():
    cfg = load_config(None, ["task.prompt_template={question}",
                             "reward.funcs=asyncrl.tasks.rewards:correct_answer",
                             "eval.pass_k=1,4", "run.resume=no"])
    assert cfg.task.prompt_template == "{question}"
    assert cfg.reward.funcs == ["asyncrl.tasks.rewards:correct_answer"]
    assert cfg.eval.pass_k == [1, 4]
    assert cfg.run.resume == "no"


def test_the_yaml_forms_still_load():
    cfg = load_config(None, ["policy.lora_target_modules=[q_proj,v_proj]", "async.max_ahead=null",
                             "trainer.lr=1e-5", "loss.params.eps_high=0.28", "loss=decoupled",
                             "rollout.engine_kwargs={}", "eval.pass_k=[1, 2]"])
    assert cfg.policy.lora_target_modules == ["q_proj", "v_proj"]
    assert cfg.async_.max_ahead is None and cfg.trainer.lr == 1e-5
    assert cfg.loss.name == "decoupled" and cfg.loss.params["eps_high"] == 0.28
    assert cfg.eval.pass_k == [1, 2]


def test_bad_typed_values_name_the_key():
    with pytest.raises(ConfigError, match=r"^config error: eval\.pass_k\[1\]: expected an integer"):
        load_config(None, ["eval.pass_k=1,x"])
    with pytest.raises(ConfigError, match=r"^config error: async\.max_ahead: expected int or NoneType"):
        load_config(None, ["async.max_ahead=soon"])


def _needs_a_file(tmp_path: Path, source) -> list[str]:
    """``task.path=...`` for a preset on a file task (gsm8k), pointing at a small JSONL."""
    if read_yaml(resolve_config_path(source)).get("task", {}).get("name") in (None, "arithmetic"):
        return []
    rows = [json.dumps({"question": f"{i} + 1?", "answer": f"#### {i + 1}"}) for i in range(20)]
    (tmp_path / "data.jsonl").write_text("\n".join(rows) + "\n")
    return [f"task.path={tmp_path / 'data.jsonl'}"]


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads_and_round_trips_through_overrides(name, tmp_path):
    cfg = load_config(name, _needs_a_file(tmp_path, name))
    # the resolved string keys set back as overrides give the same config
    strings = [f"{k}.{sk}={v}" for k, section in cfg.to_dict().items() if isinstance(section, dict)
               for sk, v in section.items() if isinstance(v, str)]
    assert strings and load_config(name, strings).to_dict() == cfg.to_dict()


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_committed_configs_load(path, tmp_path):
    assert load_config(path, _needs_a_file(tmp_path, path)).to_dict()

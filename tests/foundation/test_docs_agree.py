"""README.md and docs/*.md agree with the code: every config key they name exists, every default
they state is the dataclass default, and every repository path they mention exists.

Checkable conventions for a stated default:
  * "`section.key` (default V)", "`section.key` (..., default V)" or "`section.key` = W (...;
    default V)" in prose;
  * a table whose header has a `default` column and whose first cell names the key(s): full dotted
    keys (`run.mode`), or short names under a header "field (`SomeConfig`)" naming the dataclass;
    several keys in one cell pair with comma-separated defaults ("`min_steps`, `max_steps` | 1, 2").
"""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from asyncrl.config import Config
from asyncrl.config.help import config_keys

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
KEYS = {k.key: k for k in config_keys()}
SECTIONS = sorted({k.split(".")[0] for k in KEYS})
MAPPINGS = tuple(f"{k.key}." for k in KEYS.values() if k.type == "mapping")  # free-form sub-keys
FILE_SUFFIXES = {"py", "md", "json", "jsonl", "yaml", "yml", "html", "j2", "png", "txt", "safetensors", "csv"}
SECTION_PATHS = {k.section for k in KEYS.values()}  # task.arithmetic, trainer.vcpo, ...
# dotted words in the docs that are not config keys: Task methods, vLLM's model.load_weights, the
# deliberate typo of the errors table, a renamed key that still loads
NOT_KEYS = {"task.problems", "task.corpus", "task.reward", "task.reward_many", "model.load_weights",
            "trainer.lrr", "task.max_prompt_tokens"}

_KEY = r"(?:%s)(?:\.[a-z_0-9]+)+" % "|".join(SECTIONS)
_BACKTICKED = re.compile(rf"`({_KEY})(?:=[^`]*)?`")
_OVERRIDE = re.compile(rf"(?<![\w./-])({_KEY})=")
_PROSE_DEFAULT = re.compile(rf"`({_KEY})`(?:\s*=\s*\w+)?\s*\(([^()]*?)\bdefault:? ([^\s,;:)]+)")
_PATH = re.compile(r"(?<![\w./-])((?:configs|docs|src|benchmarks|tests)/[\w./-]*)")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _is_key(name: str) -> bool:
    return name in KEYS or name in SECTION_PATHS or name.startswith(MAPPINGS)


def _without_foreign_names(text: str) -> str:
    """Drop the first cell of rows of a table whose last column is `asyncrl`: the other library's
    option names (verl's `trainer.save_freq` is not ours)."""
    out, foreign = [], False
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            foreign = False
        elif not foreign and _cells(line)[-1] == "asyncrl":
            foreign = True
        elif foreign:
            line = "|".join(["", *_cells(line)[1:], ""])
        out.append(line)
    return "\n".join(out)


def _mentioned_keys(text: str) -> set[str]:
    text = _without_foreign_names(text)
    found = set(_BACKTICKED.findall(text)) | set(_OVERRIDE.findall(text))
    return {k for k in found if k not in NOT_KEYS and k.rsplit(".", 1)[1] not in FILE_SUFFIXES}


def _agrees(stated: str, default) -> bool:
    stated = stated.strip().strip("`'\"").rstrip(".")
    aliases = {"None": None, "True": True, "False": False}
    value = aliases[stated] if stated in aliases else yaml.safe_load(stated)
    if isinstance(default, float) and not isinstance(value, bool):
        try:
            return float(value) == default
        except (TypeError, ValueError):
            return False
    return value == default and type(value) is type(default)


def _class_sections(cls=Config, prefix="") -> dict[str, str]:
    """Dataclass name → dotted section: ArithmeticConfig → task.arithmetic."""
    out = {cls.__name__: prefix}
    for f in dataclasses.fields(cls):
        value = getattr(cls(), f.name)
        if dataclasses.is_dataclass(value):
            name = f.name.rstrip("_")
            out.update(_class_sections(type(value), f"{prefix}.{name}" if prefix else name))
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def stated_defaults(text: str) -> list[tuple[str, str]]:
    """(dotted key, stated default) pairs in one document, by the conventions above."""
    pairs = [(key, value) for key, _, value in _PROSE_DEFAULT.findall(text)]
    classes = _class_sections()
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
            continue
        if "default" not in header or set("".join(cells)) <= set("-: "):
            continue
        named = re.search(r"`(\w+Config)`", header[0])
        prefix = classes.get(named.group(1)) if named else None
        keys = re.findall(r"`([\w.]+)`", cells[0])
        keys = [f"{prefix}.{k}" if prefix else k for k in keys]
        values = [v.strip() for v in cells[header.index("default")].split(",")]
        if prefix is None and not all(k in KEYS for k in keys):
            continue  # a table of something else (loss parameters, dataset fields)
        if len(keys) == len(values) and not values[0].startswith(("see", "required")):
            pairs.extend(zip(keys, values))
    return pairs


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_config_key_named_in_the_docs_exists(doc):
    unknown = sorted(k for k in _mentioned_keys(_text(doc)) if not _is_key(k))
    assert not unknown, f"{doc.name} names config keys the dataclasses do not have: {unknown}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_stated_defaults_match_the_dataclasses(doc):
    wrong = [f"{key}: docs say {value}, code has {KEYS[key].default!r}"
             for key, value in stated_defaults(_text(doc)) if key in KEYS and not _agrees(value, KEYS[key].default)]
    assert not wrong, f"{doc.name}: {wrong}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_repository_path_in_the_docs_exists(doc):
    missing = sorted({p for p in _PATH.findall(_text(doc)) if not (ROOT / p.rstrip(".")).exists()})
    assert not missing, f"{doc.name} mentions paths that do not exist: {missing}"


def test_the_conventions_catch_known_drifts():
    """The drifts these tests were written for, each fed back in, fail."""
    assert stated_defaults("- `async.max_ahead` (W ≤ K, default K): how many") == [("async.max_ahead", "K")]
    assert stated_defaults("`async.max_ahead` = W (≤ K; default K) replaces") == [("async.max_ahead", "K")]
    assert not _agrees("K", KEYS["async.max_ahead"].default)
    table = "| field (`ArithmeticConfig`) | default | meaning |\n| --- | --- | --- |\n| `max_value` | 15 | x |\n"
    assert stated_defaults(table) == [("task.arithmetic.max_value", "15")]
    assert not _agrees("15", KEYS["task.arithmetic.max_value"].default)
    assert _agrees("3e-05", 3e-5) and _agrees("`None`", None) and _agrees("1", 1) and not _agrees("1.0", 1)
    assert "trainer.nope" in _mentioned_keys("set `trainer.nope=1` or trainer.steps=3")
    assert _mentioned_keys("see `eval.json` and `trainer.py`") == set()
    assert _mentioned_keys("| verl | asyncrl |\n| --- | --- |\n| `trainer.save_freq` | `run.x` |\n") == {"run.x"}


def _param_counts(m=None) -> tuple[int, int]:
    """Parameters of the embedded Qwen2 model (tied embeddings) for the smallest tokenizer the
    model config allows (300) and the largest (model.vocab_size): the count of a trained
    tokenizer lies between. ``m``: a model config, the default's if None."""
    m = m or Config().model
    head = m.hidden_size // m.num_heads
    kv = m.num_kv_heads * head
    layer = (m.hidden_size * m.hidden_size + m.hidden_size) + 2 * (m.hidden_size * kv + kv) \
        + m.hidden_size * m.hidden_size + 3 * m.hidden_size * m.intermediate_size + 2 * m.hidden_size
    body = m.num_layers * layer + m.hidden_size
    return body + 300 * m.hidden_size, body + m.vocab_size * m.hidden_size


def _embedded_model_sizes() -> list[tuple[int, int]]:
    """_param_counts of the default model and of every preset that resizes the embedded model."""
    from asyncrl.config import load_config

    sizes = [_param_counts()]
    for preset in sorted((ROOT / "src" / "asyncrl" / "config" / "presets").glob("*.yaml")):
        model_keys = (yaml.safe_load(preset.read_text()) or {}).get("model") or {}
        if {"hidden_size", "num_layers", "intermediate_size"} & set(model_keys):
            sizes.append(_param_counts(load_config(preset.stem, []).model))
    return sizes


def test_model_size_in_the_docs_is_the_embedded_models():
    sizes = _embedded_model_sizes()
    for doc in DOCS:
        for number in re.findall(r"(\d+(?:\.\d+)?)M[- ]param", _text(doc)):
            digits = len(number.partition(".")[2])
            assert any(round(low / 1e6, digits) <= float(number) <= round(high / 1e6, digits)
                       for low, high in sizes), (doc.name, number)


def test_objectives_behind_loss_name_do_not_include_vcpo():
    """VCPO is a trainer switch (`trainer.vcpo.enabled`), not a `loss.name`: a sentence that puts it
    behind the loss switch must also say how to turn it on."""
    for doc in DOCS:
        for sentence in re.split(r"(?<=[.;])\s", " ".join(_text(doc).split())):
            if "VCPO" in sentence and ("one switch" in sentence or "`loss.name`" in sentence):
                assert "trainer.vcpo" in sentence, (doc.name, sentence)
    readme = _text(ROOT / "README.md")
    assert "trainer.vcpo.enabled" in readme


def _paragraph(text: str, start: str) -> str:
    """The README paragraph (up to the next blank line) that starts with ``start``."""
    return text.split(start, 1)[1].split("\n\n", 1)[0]


def test_the_readme_names_every_loss_prox_strategy_and_preset():
    """The README's lists of `loss.name` values, `trainer.prox` strategies and packaged presets are the
    registries' and the presets folder's: a new one that is not listed (or a removed one still listed)
    fails here."""
    from asyncrl.objectives import LOSSES, PROX_STRATEGIES

    readme = _text(ROOT / "README.md")
    objectives = _paragraph(readme, "**Objectives.**")
    named = set(re.findall(r"`([a-z0-9_]+)`", objectives.split("chosen", 1)[0]))
    assert named - {"loss.name", "loss.params"} == set(LOSSES)
    listed = set(re.findall(r"^- `([a-z_]+)`", objectives.split("chosen", 1)[1], flags=re.M))
    assert listed == set(PROX_STRATEGIES)
    presets = {p.stem for p in (ROOT / "src" / "asyncrl" / "config" / "presets").glob("*.yaml")}
    sentence = " ".join(readme.split("packaged preset by name:", 1)[1].split("(`asyncrl config", 1)[0].split())
    assert set(re.findall(r"`([a-z0-9-]+)`", sentence)) == presets

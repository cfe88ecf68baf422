"""A bench cell (one training run described by config overrides) and the helpers suites build
cells with. Nothing here runs anything."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Cell:
    """One training run of a suite."""

    name: str  # unique, also the run directory name: "<method>-s<seed>" or "<method>-k<K>-s<seed>"
    method: str
    seed: int
    runner: str  # a key of benchmarks.bench.runner.RUNNERS: which program runs the cell
    overrides: tuple[str, ...]  # dotted key=value, applied on top of the defaults
    params: dict = field(default_factory=dict, compare=False)  # what varies across cells, for the report
    config: str | None = None  # YAML config file under the overrides (``python -m benchmarks --config``)
    repeat: int | None = None  # which run of the same work under ``--repeats`` (1-based; benchmarks.bench.repeats)


def overrides(*parts: dict[str, object]) -> tuple[str, ...]:
    """The merged switches as ``key=value`` strings (a later part wins)."""
    merged: dict[str, object] = {}
    for part in parts:
        merged.update(part)
    return tuple(f"{key}={render(value)}" for key, value in merged.items())


def render(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


SHORT_PARAMS = {"run.mode": "mode", "trainer.prox": "prox", "loss.name": "loss", "async.max_staleness": "K",
                "async.max_ahead": "W"}


def params(switches: dict[str, object], **extra) -> dict:
    """What the report groups and labels a cell by: the switches' short names, plus ``extra``."""
    return {**{SHORT_PARAMS[k]: v for k, v in switches.items() if k in SHORT_PARAMS}, **extra}


def under_config(base: dict[str, object], config: str | None, quick: bool) -> dict[str, object]:
    """The full suite's defaults without the keys ``config`` sets (the file's choice wins); --quick
    keeps all of its own, which exist to make the run short."""
    if config is None or quick:
        return base
    from asyncrl.core.loader import read_yaml
    from asyncrl.config.presets import resolve_config_path

    data = read_yaml(resolve_config_path(config))

    def is_set(key: str) -> bool:
        node: object = data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    return {key: value for key, value in base.items() if not is_set(key)}


def check_known(flag: str, chosen: list, known) -> None:
    """ValueError naming ``flag`` and the known values when ``chosen`` holds an unknown one."""
    unknown = [c for c in chosen if c not in known]
    if unknown:
        raise ValueError(f"{flag}: unknown {', '.join(map(str, unknown))} (known: {', '.join(map(str, known))})")

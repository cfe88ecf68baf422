"""The same setting under TRL, verl and AReaL, and here: the tables of docs/config.md ("Names in
other libraries", "TRL settings not offered", "TRL's defaults and ours") and docs/agents.md ("TRL
users"), read from the data file ``peers.yaml`` beside this module, so that ``--help-keys
num_generations`` finds ``rollout.samples_per_prompt``. A test keeps the docs tables equal to these
rows, and the TRL names to those of the installed TRL's ``GRPOConfig`` / ``GRPOTrainer``. Cells are
Markdown: names in backticks, "none" where asyncrl has no equivalent."""

from __future__ import annotations

from pathlib import Path

import yaml

PEERS_FILE = Path(__file__).with_name("peers.yaml")  # shipped as package data (pyproject.toml)

Row = tuple[str, ...]


def _rows(rows: list[list[str]]) -> tuple[Row, ...]:
    return tuple(tuple(row) for row in rows)


_DATA = yaml.safe_load(PEERS_FILE.read_text(encoding="utf-8"))

# library -> (their names, ours), in the docs' row order
PEER_NAMES: dict[str, tuple[tuple[str, str], ...]] = {
    library: _rows(rows) for library, rows in _DATA["peer_names"].items()}  # type: ignore[misc]
# TRL's agent arguments: apart from PEER_NAMES, whose rows are docs/config.md's tables; ``--help-keys``
# searches both
AGENT_PEER_NAMES: dict[str, tuple[tuple[str, str], ...]] = {
    library: _rows(rows) for library, rows in _DATA["agent_peer_names"].items()}  # type: ignore[misc]
# TRL's settings with no counterpart here, each with the reason; ``--help-keys`` searches them too
TRL_NOT_OFFERED: tuple[tuple[str, str], ...] = _rows(_DATA["trl_not_offered"])  # type: ignore[assignment]
# (TRL's name, its GRPOConfig default, our key, our default, note); values as JSON
TRL_DEFAULTS: tuple[tuple[str, str, str, str, str], ...] = _rows(_DATA["trl_defaults"])  # type: ignore[assignment]

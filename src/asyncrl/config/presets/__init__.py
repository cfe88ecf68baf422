"""Configuration presets shipped with the package: ``--config NAME`` reads ``NAME.yaml`` from this
folder when NAME is not a file. This folder is their only copy."""

from __future__ import annotations

from pathlib import Path

from asyncrl.core.loader import ConfigError

PRESETS_DIR = Path(__file__).resolve().parent


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def resolve_config_path(text: str | Path) -> Path:
    """An existing file as given; else a bare name (no folder, no .yaml) as the packaged preset;
    an unknown preset is a ConfigError listing the presets. Other paths are returned unchanged
    (reading them reports the missing file)."""
    path = Path(text)
    if path.is_file() or path.suffix in (".yaml", ".yml") or len(path.parts) != 1:
        return path
    preset = PRESETS_DIR / f"{path.name}.yaml"
    if not preset.is_file():
        raise ConfigError("--config", f"no such file or preset: {text} (presets: {', '.join(preset_names())})")
    return preset

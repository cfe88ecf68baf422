"""Step metrics → ``metrics.jsonl`` (one JSON object per step) and TensorBoard events."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every line parses with any JSON reader."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsWriter:
    def __init__(self, run_dir: Path, tensorboard: bool = True):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.file = self.path.open("a", buffering=1)
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self.file.write(json.dumps(record) + "\n")
        if self.tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self.tb.add_scalar(key, value, step)

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()

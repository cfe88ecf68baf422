"""Evaluation metrics over sampled answers."""

from __future__ import annotations

__all__ = ["pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from ``n`` samples of which ``c`` are correct (Chen et al. 2021).

    ``1 - C(n - c, k) / C(n, k)``: the probability that at least one of ``k`` samples drawn
    without replacement from the ``n`` is correct, computed as the numerically stable
    product ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``. Requires ``0 <= c <= n`` and
    ``1 <= k <= n``.
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{name}: must be an int, got {value!r}")
    if n < 1:
        raise ValueError(f"n: must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c: must be in [0, n={n}], got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k: must be in [1, n={n}], got {k}")
    if n - c < k:
        return 1.0
    failure = 1.0
    for i in range(n - c + 1, n + 1):
        failure *= 1.0 - k / i
    return 1.0 - failure

"""Figure basics shared by the run report (asyncrl.runtime.run_report) and the bench reports
(benchmarks.bench.figures in a checkout): a blank Agg figure of the house size, and a figure as
PNG bytes.

Figures are built with the object API (`Figure` + `FigureCanvasAgg`) rather than pyplot: pyplot
keeps a global registry of open figures and picks a GUI backend from the environment, neither of
which a headless report writer wants. A fixed DPI and a modest size (plus an optional 256-colour
palette) keep a PNG under about 150 kB.
"""

from __future__ import annotations

import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image  # a matplotlib dependency: always installed alongside it

__all__ = ["DPI", "FIGURE_SIZE", "new_figure", "png_bytes"]

DPI = 110
FIGURE_SIZE = (6.4, 3.8)  # inches; 704 x 418 px at DPI 110


def new_figure(ncols: int = 1, height: float = 1.0) -> Figure:
    """A blank Agg-backed figure, widened for multi-panel layouts; ``height`` scales the default."""
    width = FIGURE_SIZE[0] * (1 if ncols == 1 else 0.8 * ncols)
    fig = Figure(figsize=(width, FIGURE_SIZE[1] * height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Figure, *, palette: bool = False) -> bytes:
    """``fig`` as PNG bytes; ``palette``: quantised to 256 colours without dithering (line plots:
    anti-aliased translucent bands otherwise make a truecolour PNG about 3x larger)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    if not palette:
        return buf.getvalue()
    buf.seek(0)
    with Image.open(buf) as img:
        img = img.convert("RGB").quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
        out = io.BytesIO()
        img.save(out, format="PNG", optimize=True)
    return out.getvalue()

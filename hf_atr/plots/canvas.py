"""The one place that imports matplotlib: new figures on the Agg canvas, saved as PNG."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOTS_EXTRA = "plots"
INSTALL_HINT = f"pip install 'hf-atr[{PLOTS_EXTRA}]'"
"""What to run when matplotlib is missing."""
FIGURE_DPI = 100
"""Pixels per inch of saved figures: a 10 x 4 in figure is 1000 x 400 px."""
PALETTE_COLOURS = 256
"""Figures without colour maps (line and bar plots) are saved as palette PNGs of this many colours: a third of
the size of matplotlib's RGBA output (a 6-panel training figure: 52 KB instead of 160 KB) without visible
change. Heat maps keep full colour, so that their colour bars stay smooth."""


def require_matplotlib() -> None:
    """Fail early, before any work whose figures could not be drawn, when matplotlib is missing.

    Raises:
        ImportError: naming ``pip install 'hf-atr[plots]'``.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"Drawing figures needs matplotlib, which is not installed: {INSTALL_HINT}"
        ) from error


def new_figure(width: float, height: float, **kwargs: Any) -> Figure:
    """A ``matplotlib.figure.Figure`` of ``width`` x ``height`` inches with constrained layout on the Agg canvas.

    Built without pyplot: it is not registered in pyplot's figure list (nothing to close) and the process's
    backend is not switched.

    Raises:
        ImportError: when matplotlib is not installed (:func:`require_matplotlib`).
    """
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained", **kwargs)
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Figure, path: str | os.PathLike) -> Path:
    """Write ``figure`` as a PNG at :data:`FIGURE_DPI` (creating the folder) and return the path: a palette PNG
    unless the figure draws a colour-mapped image (:data:`PALETTE_COLOURS`)."""
    from PIL import Image  # Pillow comes with matplotlib

    rendered = io.BytesIO()
    figure.savefig(rendered, format="png", dpi=FIGURE_DPI, facecolor="white")
    image = Image.open(rendered).convert("RGB")
    if not any(ax.images for ax in figure.axes):
        image = image.quantize(PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="png", optimize=True)
    return path

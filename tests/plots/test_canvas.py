"""The figure canvas: Agg without pyplot, palette PNGs, and the message when matplotlib is missing."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from PIL import Image

from hf_atr.plots.canvas import INSTALL_HINT, PALETTE_COLOURS, new_figure, require_matplotlib, save_figure


def test_line_plots_are_drawn_without_pyplot_and_saved_as_palette_png(tmp_path):
    figure = new_figure(4, 3)
    figure.subplots().plot([0, 1], [1, 0])
    path = save_figure(figure, tmp_path / "nested" / "line.png")
    image = Image.open(path)
    assert image.format == "PNG" and image.mode == "P" and image.size == (400, 300)
    assert len(image.getcolors(PALETTE_COLOURS)) <= PALETTE_COLOURS
    assert type(figure.canvas).__name__ == "FigureCanvasAgg"  # not a pyplot-managed figure


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(
        ImportError, match=r"needs matplotlib, which is not installed: pip install 'hf-atr\[plots\]'"
    ):
        require_matplotlib()
    with pytest.raises(ImportError, match=r"hf-atr\[plots\]"):
        new_figure(2, 2)
    assert "hf-atr[plots]" in INSTALL_HINT


def test_saved_pixels_keep_the_drawing(tmp_path):
    figure = new_figure(2, 2)
    figure.set_layout_engine("none")
    ax = figure.add_axes((0, 0, 1, 1))
    ax.imshow(np.array([[0.0, 1.0]]), cmap="gray", vmin=0, vmax=1, aspect="auto")
    ax.set_axis_off()
    image = Image.open(save_figure(figure, tmp_path / "half.png"))
    assert image.mode == "RGB"  # a colour-mapped image keeps full colour
    pixels = np.asarray(image.convert("L"))
    assert pixels[:, :90].max() < 10 and pixels[:, -90:].min() > 245  # black left half, white right half

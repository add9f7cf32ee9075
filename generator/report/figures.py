"""The report's figures (matplotlib, Agg backend: no display, no browser needed), returned as RGB arrays so
they are written like every other image (``ReportImages.report_image``)."""
from __future__ import annotations

import numpy as np

CLASS_COLOURS = {"car": "#1f77b4", "truck": "#8c564b", "bus": "#9467bd", "pedestrian": "#d62728",
                 "bicycle": "#2ca02c", "motorcycle": "#17becf", "trailer": "#7f7f7f",
                 "construction_vehicle": "#bcbd22", "barrier": "#c7c7c7", "traffic_cone": "#ff7f0e"}


def _plt():
    import matplotlib  # matplotlib: seconds to import; only for figures

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # matplotlib: seconds to import; only for figures

    return plt


def _rgb(fig) -> np.ndarray:
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[:, :, :3].copy()
    _plt().close(fig)
    return rgb


def histogram(edges: np.ndarray, counts: np.ndarray, label: str, below: int = 0, above: int = 0) -> np.ndarray:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.2, 2.6), dpi=100)
    ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color="#4c72b0", edgecolor="white", linewidth=0.4)
    ax.set_xlabel(label, fontsize=8)
    ax.set_ylabel("rows", fontsize=8)
    ax.tick_params(labelsize=7)
    if below or above:
        ax.set_title(f"outside the bins: {below} below, {above} above", fontsize=7)
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.18, top=0.9)
    return _rgb(fig)


def bars(labels: list[str], values: list[int], xlabel: str) -> np.ndarray:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.6, 0.45 + 0.28 * max(1, len(labels))), dpi=100)
    y = np.arange(len(labels))
    ax.barh(y, values, color="#dd8452")
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()  # labels of any length
    return _rgb(fig)


def birds_eye(ego_xy: np.ndarray, tracks: dict[int, tuple[str, np.ndarray]], title: str) -> np.ndarray:
    """Tracks (coloured by class, a dot where each ends) and the ego path (black, arrow at the end) in the
    city frame, equal axes."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.4, 4.0), dpi=100)
    from matplotlib.collections import LineCollection  # matplotlib: seconds to import; only for figures

    by_cls: dict[str, list[np.ndarray]] = {}
    for _, (cls, xy) in sorted(tracks.items()):
        by_cls.setdefault(cls, []).append(xy)
    for cls, lines in sorted(by_cls.items()):  # one collection per class: fast to draw
        c = CLASS_COLOURS.get(cls, "#555555")
        ax.add_collection(LineCollection(lines, colors=c, linewidths=0.9, alpha=0.8, label=cls))
        ends = np.array([xy[-1] for xy in lines])
        ax.plot(ends[:, 0], ends[:, 1], "o", color=c, ms=2.5)
    if len(ego_xy):
        ax.plot(ego_xy[:, 0], ego_xy[:, 1], "-", color="black", lw=2.2, label="ego")
        if len(ego_xy) > 1:
            ax.annotate("", xy=ego_xy[-1], xytext=ego_xy[-2], arrowprops={"arrowstyle": "->", "lw": 2})
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x (m, city frame)", fontsize=8)
    ax.set_ylabel("y (m)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, loc="upper left", framealpha=0.7)
    fig.subplots_adjust(left=0.16, right=0.97, bottom=0.11, top=0.93)
    return _rgb(fig)

"""What a drawn figure shows, as the tests of the plots check it: the texts a reader sees and where they sit.

:func:`figure_overlaps` reads a whole figure as a reader does: no two texts on top of each other (titles, axis
labels, tick labels, an axis' offset text such as ``1e6``, legends, annotations), no text past a laid-out figure's
edge (a legend aside), no legend over the data or over another text, no line through an annotation, no axis label
longer than its axis, no Axes squeezed too small to read (a legend or its neighbours took the room), and no bar
taller than the peak its stage's tick marks (``plot_stage_memory``). The report's browser tests run it on every
figure the notebooks draw (``tests/report/figure_check.py``).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
from matplotlib.patches import Rectangle
from matplotlib.transforms import Bbox

__all__ = ["drawn_texts", "overlapping", "figure_overlaps"]

#: Pixels two boxes may share before they overlap: anti-aliased edges and a text's box touching its bar.
_TOUCH_PX = 1.5
#: The least width and height (pixels) of an Axes a reader can read: a Gantt chart squeezed to 70 px wide by
#: a twelve-entry legend is not. Colour bars are narrow by design and left out.
_LEAST_AXES_PX = (120.0, 50.0)


def drawn_texts(ax) -> list:
    """The visible texts written on ``ax`` (titles and tick labels aside), after drawing its figure."""
    ax.figure.canvas.draw()
    return [text for text in ax.texts if text.get_visible() and text.get_text()]


def overlapping(texts) -> list[tuple[str, str]]:
    """The pairs of ``texts`` (drawn) whose boxes overlap, by their strings."""
    boxes = [(text.get_text(), text.get_window_extent()) for text in texts]
    return [(a, b) for (a, first), (b, second) in combinations(boxes, 2) if first.overlaps(second)]


def figure_overlaps(figure) -> list[str]:
    """What overlaps on ``figure`` once drawn, one line each; empty when a reader can read every text.

    Texts are the figure's and each Axes' titles, axis labels, offset texts (``1e6``), tick labels, texts and
    annotations; a legend is one box. A text that runs past the edge of a laid-out figure is reported too. Data is each Axes' lines (their drawn segments), bars and other patches in front of the background (a
    shaded span behind the data is background), and scatter points.
    """
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    texts, legends, problems = [], [], []
    for text in dict.fromkeys([*figure.texts, *([figure._suptitle] if figure._suptitle else [])]):
        _add_text(texts, "figure", text, renderer)
    for legend in figure.legends:
        legends.append(("figure legend", _shrunk(legend.get_window_extent(renderer)), None))
    for number, ax in enumerate(figure.axes):
        if not ax.get_visible():
            continue
        name = _axes_name(ax, number)
        for text in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts,
                     ax.xaxis.get_offset_text(), ax.yaxis.get_offset_text(), *_tick_labels(ax.xaxis),
                     *_tick_labels(ax.yaxis)):
            _add_text(texts, name, text, renderer)
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            legends.append((f"{name}: legend", _shrunk(legend.get_window_extent(renderer)), ax))
        problems += _labels_longer_than_axes(ax, name, renderer)
        problems += _squeezed(ax, name, renderer) + _bars_above_their_peak(ax, name)
        data = _data_shapes(ax)
        for label, box in ((label, box) for label, box, owner in texts if owner is ax and _annotation(label, ax)):
            problems += [f"{label} is crossed by {what}" for what, shape in data if shape.crosses(box)
                         and what.startswith("line")]
        for label, box, owner in legends:
            if owner is ax:
                problems += [f"{label} covers {what}" for what, shape in data if shape.crosses(box)]
    boxes = [(label, box) for label, box, _ in texts] + [(label, box) for label, box, _ in legends]
    problems += [f"{a} overlaps {b}" for (a, first), (b, second) in combinations(boxes, 2) if first.overlaps(second)]
    if figure.get_layout_engine() is not None:
        problems += _past_the_edge([(label, box) for label, box, _ in texts], figure.bbox)
    return problems


def _past_the_edge(boxes, edge: Bbox) -> list[str]:
    """The texts that run past the figure's edge (a title wider than its figure), by how far on each side: a
    plain save cuts them, and a tight bounding box (the notebooks' inline figures, the dashboards' states)
    widens the picture past the size it was laid out for, which the page then shrinks to fit. Only a figure
    with a layout engine (constrained, tight) is read: one laid out still past its edge holds a text no layout
    fits; without one, ticks and labels past the edge are the default margins', which the tight bounding box
    takes in. Legends are left out: one placed beside its Axes is a choice the plots make."""
    problems = []
    for label, box in boxes:
        sides = {"left": edge.x0 - box.x0, "right": box.x1 - edge.x1, "bottom": edge.y0 - box.y0,
                 "top": box.y1 - edge.y1}
        past = ", ".join(f"{px:.0f} px {side}" for side, px in sides.items() if px > 0)
        if past:
            problems.append(f"{label} runs past the figure's edge ({past})")
    return problems


def _add_text(texts: list, name: str, text, renderer) -> None:
    if text.get_visible() and text.get_text().strip():
        owner = text.axes
        texts.append((f"{name}: {text.get_text().strip()!r}", _shrunk(text.get_window_extent(renderer)), owner))


def _tick_labels(axis) -> list:
    """The tick labels an axis draws (those of ticks within its view)."""
    return [label for tick in axis._update_ticks() for label in (tick.label1, tick.label2)
            if label.get_visible() and label.get_text()]


def _axes_name(ax, number: int) -> str:
    title = ax.get_title() or ax.get_title(loc="left") or ax.get_ylabel().split("\n")[0] or f"axes {number}"
    return f"axes {number} ({title[:40]})"


def _annotation(label: str, ax) -> bool:
    """Whether ``label`` names one of ``ax``'s own texts (annotations), not a title, axis label or tick label."""
    return any(label.endswith(repr(text.get_text().strip())) for text in ax.texts if text.get_text().strip())


def _shrunk(box: Bbox) -> Bbox:
    """``box`` less :data:`_TOUCH_PX` on every side (touching is not overlapping)."""
    return Bbox.from_extents(box.x0 + _TOUCH_PX, box.y0 + _TOUCH_PX, box.x1 - _TOUCH_PX, box.y1 - _TOUCH_PX)


def _labels_longer_than_axes(ax, name: str, renderer) -> list[str]:
    """An axis label that runs past its axis: a y-label taller than the Axes, an x-label wider."""
    frame = ax.get_window_extent(renderer)
    problems = []
    for label, size, room in ((ax.yaxis.label, "height", frame.height), (ax.xaxis.label, "width", frame.width)):
        if label.get_visible() and label.get_text().strip():
            extent = getattr(label.get_window_extent(renderer), size)
            if extent > room + 2 * _TOUCH_PX:
                problems.append(f"{name}: label {label.get_text()!r} is {extent:.0f} px, longer than its axis "
                                f"({room:.0f} px)")
    return problems


def _squeezed(ax, name: str, renderer) -> list[str]:
    """An Axes narrower or lower than :data:`_LEAST_AXES_PX` (a colour bar aside)."""
    if ax.get_label() == "<colorbar>":
        return []
    frame = ax.get_window_extent(renderer)
    (width, height), (least_width, least_height) = (frame.width, frame.height), _LEAST_AXES_PX
    if width >= least_width and height >= least_height:
        return []
    return [f"{name}: squeezed to {width:.0f} x {height:.0f} px (a readable Axes is at least {least_width:.0f} x "
            f"{least_height:.0f})"]


def _bars_above_their_peak(ax, name: str) -> list[str]:
    """Stacked bars that reach above the ``peak`` tick drawn at their x (a part stacked that the peak does not
    hold), by more than half a percent of the peak."""
    peaks = {}
    for collection in ax.collections:
        if collection.get_label() == "peak":
            peaks.update({round(float(x), 6): float(y) for x, y in collection.get_offsets()})
    tops = {}
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_fill() and patch.get_height() > 0:
            x = round(patch.get_x() + patch.get_width() / 2, 6)
            tops[x] = max(tops.get(x, -np.inf), patch.get_y() + patch.get_height())
    return [f"{name}: the bar at x={x:g} reaches {top:,.0f}, above the peak {peaks[x]:,.0f} it marks"
            for x, top in sorted(tops.items()) if x in peaks and top > peaks[x] + 0.005 * abs(peaks[x])]


class _Shape:
    """Something drawn on an Axes, in display pixels: segments (a line) or boxes (bars, points)."""

    def __init__(self, segments=None, boxes=()):
        self.segments = segments
        self.boxes = list(boxes)

    def crosses(self, box: Bbox) -> bool:
        if any(box.overlaps(other) for other in self.boxes):
            return True
        if self.segments is None or len(self.segments) == 0:
            return False
        # Points along each segment, a pixel apart: a line that passes through the box has one inside it.
        for (x0, y0), (x1, y1) in self.segments:
            steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 2
            xs, ys = np.linspace(x0, x1, steps), np.linspace(y0, y1, steps)
            if np.any((xs > box.x0) & (xs < box.x1) & (ys > box.y0) & (ys < box.y1)):
                return True
        return False


def _data_shapes(ax) -> list[tuple[str, _Shape]]:
    """The Axes' data as shapes, each with a name: its lines, bars and patches, and scatter points."""
    frame = ax.get_window_extent()
    shapes = []
    for line in ax.lines:
        if not line.get_visible():
            continue
        points = _clipped(np.asarray(line.get_transform().transform(line.get_xydata()), float), frame)
        points = _stepped(points, line.get_drawstyle())
        segments = [(a, b) for a, b in zip(points[:-1], points[1:]) if np.isfinite([*a, *b]).all()]
        has_line = line.get_linestyle() not in ("None", "", " ", "none")
        marks = [] if line.get_marker() in (None, "None", "", " ") else [
            Bbox.from_extents(x - 2, y - 2, x + 2, y + 2) for x, y in points if np.isfinite([x, y]).all()]
        shapes.append((f"line {line.get_label()!r}", _Shape(segments if has_line else None, marks)))
    for patch in ax.patches:
        if patch.get_visible() and patch.get_zorder() >= 1 and isinstance(patch, Rectangle) and \
                patch.get_width() and patch.get_height():
            shapes.append(("a bar", _Shape(boxes=[_shrunk(patch.get_window_extent())])))
    for collection in ax.collections:
        offsets = collection.get_offsets()
        if collection.get_visible() and len(offsets) and collection.get_zorder() >= 1:
            points = collection.get_offset_transform().transform(offsets)
            shapes.append((f"points {collection.get_label()!r}", _Shape(boxes=[
                Bbox.from_extents(x - 2, y - 2, x + 2, y + 2) for x, y in points if np.isfinite([x, y]).all()])))
    return shapes


def _stepped(points: np.ndarray, drawstyle: str) -> np.ndarray:
    """The corners a ``steps-*`` line draws between its points (``steps-post``: across, then up)."""
    if not drawstyle.startswith("steps") or len(points) < 2:
        return points
    corners = [points[0]]
    for (x0, y0), (x1, y1) in zip(points[:-1], points[1:]):
        corners += [(x1, y0) if drawstyle == "steps-post" else (x0, y1), (x1, y1)]
    return np.asarray(corners)


def _clipped(points: np.ndarray, frame: Bbox) -> np.ndarray:
    """Points outside the Axes (an ``axhline`` spans it in axes coordinates already) kept where they are: the
    segments are cut to the frame when checked, as matplotlib clips them when it draws."""
    points = points.copy()
    points[:, 0] = np.clip(points[:, 0], frame.x0, frame.x1)
    points[:, 1] = np.clip(points[:, 1], frame.y0, frame.y1)
    return points

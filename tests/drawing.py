"""What a drawn figure shows, as the tests of the plots check it: the texts a reader sees and where they sit."""

from itertools import combinations


def drawn_texts(ax) -> list:
    """The visible texts written on ``ax`` (titles and tick labels aside), after drawing its figure."""
    ax.figure.canvas.draw()
    return [text for text in ax.texts if text.get_visible() and text.get_text()]


def overlapping(texts) -> list[tuple[str, str]]:
    """The pairs of ``texts`` (drawn) whose boxes overlap, by their strings."""
    boxes = [(text.get_text(), text.get_window_extent()) for text in texts]
    return [(a, b) for (a, first), (b, second) in combinations(boxes, 2) if first.overlaps(second)]

"""Matplotlib drawings of sappkit's frames: ``plot_x(frame, *, ax=None, ...) -> Axes``, one module per model."""

"""ipywidgets dashboards, one module per notebook; thin wiring of tested library functions."""

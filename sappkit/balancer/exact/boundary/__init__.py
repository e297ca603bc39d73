"""The exact search for one or two body kinds over several chunks: a DP over stages that carries the cell
where the first kind ends (:mod:`.search`), its stage tables, their cells and caps, and the split objective
of ``m = p``.
"""

__all__: list[str] = []

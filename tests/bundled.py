"""The bundled example inputs (``data/``) as the tests read them."""

from pathlib import Path

from sappkit import Partition, even_assignment

#: The repository's bundled data folder.
DATA = Path(__file__).resolve().parents[1] / "data"
#: The trainer's recompute modes most tests choose among.
MODES = ("off", "selective", "full")


def even_partition(table, *, stages=8, micro_batches=16):
    """The even 1F1B partition of ``table``'s body layers, configured to full recompute."""
    assignment = even_assignment(table, stages=stages, option="full")
    return Partition.from_assignment(assignment, stages=stages, micro_batches=micro_batches,
                                     kind_order=table.body_kinds)

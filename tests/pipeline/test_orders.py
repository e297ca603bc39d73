"""Fill-and-drain orders: GPipe and looped breadth-first."""

from sappkit.pipeline.orders import stage_orders


def test_gpipe_runs_every_forward_then_every_backward_in_order():
    assert stage_orders("gpipe", 2, 3) == (((0, 0, 0), (0, 0, 1), (0, 0, 2), (1, 0, 0), (1, 0, 1), (1, 0, 2)),) * 2


def test_looped_bfs_runs_chunk_by_chunk_and_back_last_micro_batch_first():
    forwards = tuple((0, c, u) for c in range(2) for u in range(2))
    backwards = ((1, 1, 1), (1, 1, 0), (1, 0, 1), (1, 0, 0))
    assert stage_orders("looped_bfs", 3, 2, 2) == (forwards + backwards,) * 3
    assert stage_orders("looped_bfs", 2, 2, 1)[0] == ((0, 0, 0), (0, 0, 1), (1, 0, 1), (1, 0, 0))

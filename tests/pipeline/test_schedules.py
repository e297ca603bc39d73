"""Micro-batches in flight per schedule, the forward-in-backward factors, model order and refusals."""

import numpy as np
import pytest

from sappkit import InputError, in_flight
from sappkit.pipeline.schedules import forward_in_backward, in_flight_counts, model_order


def _grid(schedule, p, m, v=1, **kw):
    return in_flight_counts(schedule, p, m, v, **kw).tolist()


def test_1f1b_counts_down_and_caps_at_micro_batches():
    assert _grid("1f1b", 4, 8) == [[4, 3, 2, 1]]
    assert _grid("1f1b", 4, 2) == [[2, 2, 2, 1]]


def test_interleaved_first_and_last_chunk_adjustments():
    # Every cell starts at p = 4; chunk 0 adds max(0, 3 - 2s); the last chunk adds min(0, 3 - 2s).
    assert _grid("interleaved", 4, 8, 3) == [[7, 5, 4, 4], [4, 4, 4, 4], [4, 4, 3, 1]]
    # Capped at m.
    assert _grid("interleaved", 4, 4, 2) == [[4, 4, 4, 4], [4, 4, 3, 1]]


def test_interleaved_less_memory_and_one_chunk():
    assert _grid("interleaved", 4, 8, 2, less_memory=True) == [[4, 4, 4, 4], [4, 3, 2, 1]]
    assert _grid("interleaved", 4, 8, 1) == _grid("1f1b", 4, 8)
    # SAPP's pipeline balancer defines less-memory with one chunk too (MindFormers configs set it): the 1F1B counts.
    assert _grid("1f1b", 4, 8, less_memory=True) == _grid("interleaved", 4, 8, 1, less_memory=True) \
        == _grid("1f1b", 4, 8)


def test_dualpipev_the_v():
    assert _grid("dualpipev", 3, 6, 2) == [[6, 5, 4], [1, 2, 3]]


def test_the_schedules_pytorch_runs():
    # Fill and drain: every micro-batch in flight everywhere; ZB-V and the split DualPipeV hold what DualPipeV holds.
    assert _grid("gpipe", 3, 5) == [[5, 5, 5]]
    assert _grid("looped_bfs", 2, 3, 2) == [[3, 3], [3, 3]]
    assert _grid("zbv", 3, 6, 2) == _grid("dualpipev_split", 3, 6, 2) == _grid("dualpipev", 3, 6, 2)
    assert _grid("zbv", 3, 4, 2) == [[4, 4, 4], [1, 2, 3]]
    # Interleaved zero bubble, one round (m < 2p): m on the first chunks, min(m, p) on the last.
    assert _grid("zb_interleaved", 4, 6, 3) == [[6] * 4, [6] * 4, [4] * 4]
    assert _grid("zb_interleaved", 4, 8, 2) == [[8] * 4, [4] * 4]


def test_dualpipe_holds_what_1f1b_holds_in_each_direction():
    # Rank s: stage s of the forward copy (p - s), stage p - 1 - s of the reverse copy (s + 1); p + 1 in all.
    assert _grid("dualpipe", 4, 8, 2) == [[4, 3, 2, 1], [1, 2, 3, 4]]


def test_seqpipe_one_chunk_counts_slices():
    # p - s + k - 1 slices, capped at m k.
    assert _grid("seqpipe", 4, 2, seq_split=3) == [[6, 5, 4, 3]]
    assert _grid("seqpipe", 4, 1, seq_split=2) == [[2, 2, 2, 2]]


def test_seqpipe_interleaved_fills_earlier_chunks():
    # Worked by hand from the rule: the last chunk holds k; walking up from
    # stage p-2, the first chunk whose next stage is not full gets `gap` more.
    assert _grid("seqpipe", 4, 4, 2, seq_split=2) == [[8, 6, 4, 4], [4, 4, 4, 2]]
    assert _grid("seqpipe", 4, 4, 2, seq_split=2, less_memory=True) == [[6, 5, 4, 4], [3, 3, 3, 2]]


@pytest.mark.parametrize("schedule, p, m, v, k", [
    ("1f1b", 2, 1, 1, 1), ("1f1b", 16, 64, 1, 1), ("interleaved", 8, 8, 3, 1),
    ("interleaved", 5, 7, 2, 1), ("dualpipev", 4, 8, 2, 1), ("seqpipe", 6, 3, 1, 4),
    ("seqpipe", 6, 3, 3, 2),
])
def test_frame_is_model_order_and_positive(schedule, p, m, v, k):
    frame = in_flight(schedule, p, m, chunks=v, seq_split=k)
    assert list(frame.columns) == ["stage", "chunk", "in_flight"]
    assert frame[["chunk", "stage"]].apply(tuple, axis=1).tolist() == [(c, s) for c in range(v) for s in range(p)]
    assert (frame["in_flight"] >= 1).all()
    assert (frame["in_flight"] <= m * k).all()


def test_forward_in_backward_refuses_a_flag_that_is_not_a_bool():
    with pytest.raises(InputError) as error:
        forward_in_backward(4, 8, less_memory="yes")
    assert str(error.value) == "less_memory must be a bool; got 'yes'"


def test_forward_in_backward_factors():
    np.testing.assert_array_equal(forward_in_backward(4, 8), [3, 1, 1, 3])
    np.testing.assert_array_equal(forward_in_backward(4, 7), [0, 0, 1, 3])
    np.testing.assert_array_equal(forward_in_backward(5, 4), [0, 0, 0, 2, 4])
    np.testing.assert_array_equal(forward_in_backward(4, 4, less_memory=True), [0, 1, 2, 3])


def test_model_order():
    assert model_order("interleaved", 2, 2) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert model_order("dualpipev", 3, 2) == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0)]
    assert model_order("zbv", 3, 2) == model_order("dualpipev_split", 3, 2) == model_order("dualpipev", 3, 2)
    assert model_order("dualpipe", 4, 2) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (1, 2), (1, 1), (1, 0)]


@pytest.mark.parametrize("args, kwargs, message", [
    (("pipedream", 4, 8), {}, "schedule must be one of '1f1b', 'interleaved', 'dualpipev', 'seqpipe', 'gpipe', "
                              "'looped_bfs', 'zb_interleaved', 'zbv', 'dualpipev_split', 'dualpipe'; got 'pipedream'"),
    (("1f1b", 1, 8), {}, "stages must be an int >= 2; got 1 (a pipeline needs at least two stages)"),
    (("1f1b", 4, 0), {}, "micro_batches must be an int >= 1; got 0"),
    (("1f1b", 4, 2.5), {}, "micro_batches must be an int >= 1; got 2.5"),
    (("1f1b", 4, 8), {"chunks": 2}, "chunks must be 1 for schedule '1f1b'; got 2 (use schedule='interleaved')"),
    (("interleaved", 4, 8), {"seq_split": 2},
     "seq_split must be 1 for schedule 'interleaved'; got 2 (sequence splitting is the 'seqpipe' schedule)"),
    (("interleaved", 4, 3), {"chunks": 2},
     "micro_batches must be >= stages = 4 for an interleaved schedule with 2 chunks; got 3"),
    (("dualpipev", 4, 8), {"chunks": 3}, "chunks must be 2 for schedule 'dualpipev' (the V); got 3"),
    (("dualpipev", 4, 7), {"chunks": 2},
     "micro_batches must be >= 2 * stages = 8 for schedule 'dualpipev'; got 7 "
     "(DualPipeV's step order needs two micro-batches per stage)"),
    (("dualpipev", 4, 8), {"chunks": 2, "less_memory": True}, "less_memory does not apply to schedule 'dualpipev'"),
    (("seqpipe", 4, 1), {"chunks": 2, "seq_split": 3},
     "micro_batches * seq_split must be >= stages = 4 for an interleaved seqpipe schedule; got 1 * 3 = 3"),
    (("interleaved", 4, 8), {"chunks": 2, "less_memory": "yes"}, "less_memory must be a bool; got 'yes'"),
    (("gpipe", 4, 8), {"chunks": 2}, "chunks must be 1 for schedule 'gpipe'; got 2 (use schedule='looped_bfs')"),
    (("zbv", 4, 8), {}, "chunks must be 2 for schedule 'zbv' (the V); got 1"),
    (("dualpipev_split", 4, 7), {"chunks": 2},
     "micro_batches must be >= 2 * stages = 8 for schedule 'dualpipev_split'; got 7 "
     "(DualPipeV's step order needs two micro-batches per stage)"),
    (("dualpipe", 4, 8), {}, "chunks must be 2 for schedule 'dualpipe' (one stage of each direction's model copy "
                             "per rank); got 1"),
    (("dualpipe", 6, 12), {"chunks": 2, "less_memory": True},
     "less_memory applies to the 'interleaved', 'seqpipe' and (one chunk, the 1F1B counts) '1f1b' schedules; "
     "got schedule 'dualpipe'"),
    (("dualpipe", 3, 8), {"chunks": 2},
     "stages must be even for schedule 'dualpipe'; got 3 (ranks pair up, s with p - 1 - s)"),
    (("dualpipe", 4, 6), {"chunks": 2},
     "micro_batches must be even and >= 2 * stages = 8 for schedule 'dualpipe'; got 6 (half run in each "
     "direction, and DualPipe's step order needs p per direction)"),
    (("dualpipe", 4, 9), {"chunks": 2},
     "micro_batches must be even and >= 2 * stages = 8 for schedule 'dualpipe'; got 9 (half run in each "
     "direction, and DualPipe's step order needs p per direction)"),
    (("zb_interleaved", 4, 9), {"chunks": 2},
     "micro_batches must be a multiple of max(1, micro_batches // stages) = 2 for schedule 'zb_interleaved' "
     "(PyTorch runs it in equal rounds); got 9"),
    (("looped_bfs", 4, 8), {"chunks": 2, "less_memory": True},
     "less_memory applies to the 'interleaved', 'seqpipe' and (one chunk, the 1F1B counts) '1f1b' schedules; "
     "got schedule 'looped_bfs'"),
])
def test_refusals_name_the_argument(args, kwargs, message):
    with pytest.raises(InputError) as err:
        in_flight(*args, **kwargs)
    assert str(err.value) == message

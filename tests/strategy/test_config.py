"""Strategy: the degrees multiply as Megatron lays ranks out, and every rule a trainer enforces is refused by name."""

import pytest

from sappkit import InputError, Strategy
from sappkit.pipeline.schedules import SCHEDULES, TWO_DIRECTIONS, schedule_chunks


def test_devices_micro_batches_and_label():
    s = Strategy(tensor_parallel=8, pipeline_parallel=4, data_parallel=16, context_parallel=2,
                 expert_parallel=8, micro_batch_size=2, schedule="interleaved", virtual_stages=3, zero=0)
    assert s.devices == 8 * 4 * 16 * 2
    assert s.micro_batches(1024) == 1024 // (16 * 2)
    assert s.label == "t8 p4 v3 dp16 cp2 ep8 b2 interleaved zero0"
    assert Strategy(expert_tensor_parallel=2, tensor_parallel=2, sequence_parallel=False,
                    dtype="fp16").label == "t2 p1 v1 dp1 cp1 ep1 etp2 b1 1f1b zero1 no-sp fp16"
    assert s.parallel.context_parallel == 2 and s.parallel.zero == 0
    assert Strategy(**s.to_dict()) == s


@pytest.mark.parametrize("schedule", [name for name in SCHEDULES if name not in TWO_DIRECTIONS])
def test_every_schedule_with_the_chunks_it_runs(schedule):
    v = schedule_chunks(schedule, 2)
    assert Strategy(pipeline_parallel=4, virtual_stages=v, schedule=schedule).virtual_stages == v


@pytest.mark.parametrize("kwargs, message", [
    (dict(tensor_parallel=0), "tensor_parallel must be an int >= 1; got 0"),
    (dict(pipeline_parallel=4, schedule="zbv"), "virtual_stages must be 2 for schedule 'zbv' (the V); got 1"),
    (dict(pipeline_parallel=4, schedule="1f1b", virtual_stages=2),
     "virtual_stages must be 1 for schedule '1f1b' (one chunk per stage); got 2"),
    (dict(schedule="interleaved", virtual_stages=2),
     "pipeline_parallel=1 runs no pipeline: give schedule='1f1b' and virtual_stages=1; "
     "got schedule='interleaved', virtual_stages=2"),
    (dict(expert_parallel=3, data_parallel=4),
     "expert_parallel * expert_tensor_parallel = 3 * 1 must divide tensor_parallel * context_parallel * "
     "data_parallel = 4"),
    (dict(schedule="2f2b"), "schedule must be one of '1f1b', 'interleaved', 'dualpipev', 'seqpipe', 'gpipe', "
                            "'looped_bfs', 'zb_interleaved', 'zbv', 'dualpipev_split', 'dualpipe'; got '2f2b'"),
    (dict(pipeline_parallel=4, schedule="dualpipe"),
     "virtual_stages must be 2 for schedule 'dualpipe' (a stage of each model copy); got 1"),
    (dict(sequence_parallel=1), "sequence_parallel must be a bool; got 1"),
])
def test_bad_strategies_are_refused_by_name(kwargs, message):
    with pytest.raises(InputError) as error:
        Strategy(**kwargs)
    assert str(error.value) == message


def test_global_batch_must_divide():
    with pytest.raises(InputError, match=r"^global_batch must be a multiple of data_parallel \* micro_batch_size "
                                         r"= 4 \* 2 = 8; got 12$"):
        Strategy(data_parallel=4, micro_batch_size=2).micro_batches(12)

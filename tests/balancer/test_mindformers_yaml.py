"""Plan.to_yaml writes MindFormers' sections without the trainers: the same text as the trainers' MindFormers writer,
for every schedule MindFormers runs, and a refusal naming the schedules for one it does not."""

import pytest
import yaml

import sappkit
from sappkit.errors import InputError
from sappkit.trainers.mindformers import mindformers_config

LAYERS = sappkit.read_layers_json("data/llama2_70b.json")


@pytest.mark.parametrize("setting", [
    dict(stages=16, micro_batches=32, memory_mb=58000),
    dict(stages=8, micro_batches=32, memory_mb=50000, chunks=2, schedule="interleaved"),
    dict(stages=4, micro_batches=16, memory_mb=30000),
    dict(stages=4, micro_batches=8, memory_mb=60000, chunks=2, schedule="zbv"),
], ids=["1f1b", "interleaved", "tight", "zbv"])
@pytest.mark.parametrize("strict", [True, False])
def test_to_yaml_is_the_trainers_mindformers_text(setting, strict):
    plan = sappkit.balance(LAYERS, **setting)
    try:
        expected = mindformers_config(plan, strict=strict).to_yaml()
    except InputError:
        with pytest.raises(InputError):
            plan.to_yaml(strict=strict)
        return
    assert plan.to_yaml(strict=strict) == expected
    document = yaml.safe_load(expected)
    assert document["model"]["model_config"]["offset"] == plan.offsets(strict=False)["offset"]
    assert document["parallel_config"] == {"pipeline_stage": setting["stages"],
                                           "micro_batch_num": setting["micro_batches"]}


def test_to_yaml_refuses_a_schedule_mindformers_does_not_run():
    plan = sappkit.balance(LAYERS, stages=4, micro_batches=8, memory_mb=60000, chunks=2, schedule="dualpipev")
    with pytest.raises(InputError) as error:
        plan.to_yaml()
    assert str(error.value) == ("MindFormers runs no 'dualpipev' schedule; plan for one of '1f1b', 'interleaved', "
                                "'seqpipe', 'zbv'")

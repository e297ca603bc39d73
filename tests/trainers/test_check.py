"""check_config finds each trap users hit, in a test config, with a one-line finding and the fix."""

import pytest
import yaml

from sappkit import InputError, check_config, read_trainer_config

from . import tables

def table(count):
    return tables.table(count, head=(2.0, 3.0))  # a heavy embedding: its stage is the slowest


def names(checked):
    return checked.findings["finding"].tolist()


def one_line(checked, name):
    row = checked.findings[checked.findings["finding"] == name].iloc[0]
    assert "\n" not in row["message"] and "\n" not in row["fix"] and row["fix"]
    return row


def test_megatron_dropping_layers_by_integer_division_is_an_error_with_the_fix():
    # 80 layers, 8 stages, 4 layers per virtual stage: 80 // 8 = 10 per stage -> 2 chunks of 4 -> 64 layers
    checked = check_config(["--num-layers", "80", "--pipeline-model-parallel-size", "8",
                            "--num-layers-per-virtual-pipeline-stage", "4", "--global-batch-size", "16"],
                           table(80), memory_mb=100_000)
    row = one_line(checked, "layers_dropped")
    assert row["severity"] == "error" and not checked.ok
    assert row["message"] == ("Megatron builds 64 of the 80 layers (80 // 8 = 10 per stage, in 2 chunks of "
                              "--num-layers-per-virtual-pipeline-stage 4): it drops 16; today's Megatron-LM "
                              "refuses the split, older releases trained the wrong model")
    assert checked.plan.stages["layers"].sum() == 64  # priced as built
    assert checked.plan.notes[-1] == "priced as built: 64 body layers, not the 80 declared"


def test_megatron_even_split_that_does_not_divide():
    checked = check_config(["--num-layers", "30", "--pipeline-model-parallel-size", "4"], table(30),
                           memory_mb=100_000)
    assert one_line(checked, "layers_dropped")["message"].startswith("Megatron builds 28 of the 30 layers "
                                                                     "(30 // 4 = 7 per stage)")


def test_megatron_chunks_that_do_not_divide_a_stage():
    checked = check_config(["--num-layers", "30", "--pipeline-model-parallel-size", "2",
                            "--num-virtual-stages-per-pipeline-rank", "2", "--global-batch-size", "4"],
                           table(30), memory_mb=100_000)
    assert one_line(checked, "layers_dropped")["message"].startswith(
        "Megatron builds 28 of the 30 layers (30 // 2 = 15 per stage, then // 2 chunks)")


def test_mindformers_offsets_that_do_not_sum_to_the_remainder(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"parallel_config": {"pipeline_stage": 4, "micro_batch_num": 8},
                                    "model": {"model_config": {"num_layers": 30, "offset": [1, 1, 1, 0]}}}))
    checked = check_config(path, table(30), memory_mb=100_000)
    assert one_line(checked, "layers_added")["message"] == (
        "the offsets place 31 of the 30 layers (30 // (4 x 1) = 7 per cell + offsets summing to 3): MindFormers "
        "refuses them (they must sum to 30 % 4 = 2)")


def test_torchtitan_layers_in_no_model_part_are_dropped(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = [["tok_embeddings", '
                    '"layers.0", "layers.1"], ["layers.2", "norm", "output"]]\n[training]\nlocal_batch_size = 4\n'
                    '[activation_checkpoint]\nmode = "none"\n')
    checked = check_config(path, table(4), memory_mb=100_000)
    assert one_line(checked, "layers_dropped")["message"] == (
        "layers 3 sit in no model part: torchtitan's split deletes them, so it trains 3 of the 4 layers")


def test_a_stage_over_memory_and_the_average_that_hides_it():
    checked = check_config(["--num-layers", "8", "--pipeline-model-parallel-size", "4", "--global-batch-size", "8"],
                           table(8), memory_mb=600)
    over = one_line(checked, "stage_over_memory")
    assert over["severity"] == "error" and over["message"].startswith("stage 0 needs ")
    assert over["fix"] == ("recompute more on those stages or move layers off them: sappkit balance --trainer "
                           "megatron finds a plan megatron can run")
    assert one_line(checked, "stage_average_hides_peak")["severity"] == "warning"


def test_an_uneven_zb_v_stage(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "parallel_config": {"pipeline_stage": 2, "micro_batch_num": 4},
        "parallel": {"pipeline_config": {"pipeline_interleave": True, "pipeline_scheduler": "zero_bubble_v"}},
        "model": {"model_config": {"num_layers": 8, "pp_interleave_num": 2, "offset": [[1, 0], [-1, 0]]}}}))
    checked = check_config(path, table(8), memory_mb=100_000)
    assert one_line(checked, "uneven_v_stage")["message"] == (
        "1 stage(s) split their layers unevenly over the V's two chunks, e.g. stage 0: 3 down + 1 up; ZB-V "
        "implementations that halve a stage need an even count split equally")


@pytest.mark.parametrize("config, message", [
    (["--num-layers", "8", "--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2",
      "--global-batch-size", "5"],
     "5 micro-batches in groups of 2 leave a last group of 1 < p = 2: Megatron refuses it"),
    ({"parallelism": {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "Interleaved1F1B",
                      "pipeline_parallel_layers_per_stage": 3}, "training": {"local_batch_size": 5}},
     "Interleaved1F1B runs micro-batches in rounds of max(1, m // p) = 2, which must divide m = 5: PyTorch "
     "refuses it"),
    ({"parallel_config": {"pipeline_stage": 4, "micro_batch_num": 2},
      "model": {"model_config": {"num_layers": 8}}},
     "micro_batch_num 2 < pipeline_stage 4: MindFormers requires at least one micro-batch per stage"),
])
def test_an_unsupported_micro_batch_count(config, message):
    trainer = None if isinstance(config, list) else "torchtitan" if "parallelism" in config else "mindformers"
    checked = check_config(config, table(8), memory_mb=100_000, trainer=trainer)
    assert one_line(checked, "microbatches_unsupported")["message"] == message


def test_a_stage_holding_only_the_mtp_layer():
    checked = check_config(["--num-layers", "6", "--pipeline-model-parallel-size", "4", "--mtp-num-layers", "1",
                            "--pipeline-model-parallel-layout", "Et|ttt|tt|mL", "--global-batch-size", "4"],
                           table(6), memory_mb=100_000)
    assert names(checked) == ["mtp_only_stage", "uneven_stage"]  # stage 1's 3 layers, priced below
    assert one_line(checked, "mtp_only_stage")["message"].startswith("stage 3 chunk 0 holds only MTP layers (mL)")


def test_block_recompute_that_megatron_applies_equally_on_every_stage():
    checked = check_config(["--num-layers", "8", "--pipeline-model-parallel-size", "4", "--global-batch-size", "8",
                            "--recompute-granularity", "full", "--recompute-method", "block",
                            "--recompute-num-layers", "2"], table(8), memory_mb=500)
    row = one_line(checked, "block_recompute_uniform")
    assert row["message"] == ("--recompute-method block recomputes 2 layer(s) per chunk on every stage; stages 1-3 "
                              "would fit with 0 to 0: they recompute for nothing")


def test_the_embedding_stage_that_holds_as_many_layers_as_the_others():
    checked = check_config(["--num-layers", "8", "--pipeline-model-parallel-size", "4", "--global-batch-size", "8"],
                           table(8), memory_mb=100_000)
    assert names(checked) == ["head_tail_stage_slowest"]
    assert one_line(checked, "head_tail_stage_slowest")["message"] == (
        "stage 0 holds the embed and 2 layers, as many as the others: it is the slowest, 3.85 time units above the "
        "median stage")
    fixed = check_config(["--num-layers", "8", "--pipeline-model-parallel-size", "4", "--global-batch-size", "8",
                          "--decoder-first-pipeline-num-layers", "1", "--decoder-last-pipeline-num-layers", "1"],
                         table(8), memory_mb=100_000)
    assert fixed.findings.empty and fixed.ok


def test_the_report_prints_within_100_columns():
    checked = check_config(["--num-layers", "80", "--pipeline-model-parallel-size", "8",
                            "--num-layers-per-virtual-pipeline-stage", "4", "--global-batch-size", "16"],
                           table(80), memory_mb=5_000)
    text = checked.describe()
    assert all(len(line) <= 100 for line in text.splitlines())
    assert text.splitlines()[0] == "megatron config: t1 p8 v2 dp1 cp1 ep1 b1 interleaved zero0 no-sp fp32, m=16"


def test_a_config_whose_model_is_not_the_tables_is_refused():
    with pytest.raises(InputError) as caught:
        read_trainer_config(["--num-layers", "8", "--pipeline-model-parallel-size", "2"], layers=table(6),
                            memory_mb=1000)
    assert str(caught.value) == ("the layer table has 6 body layers but the megatron config declares 8; price it on "
                                 "a table of its model")


def test_an_uneven_stage_is_flagged_with_both_times_and_the_balanced_layout():
    """Issue 39: the bundled torchtitan config puts 6 layers on stage 1 (189 ms against 157 ms elsewhere) and was
    not flagged; the finding prices the balancer's layout with the same (full) recompute on the same pipeline."""
    from sappkit import balance, read_layers_json

    from ..bundled import DATA

    layers = read_layers_json(DATA / "llama2_70b.json")
    checked = check_config(DATA / "torchtitan_llama2_70b.toml", layers, memory_mb=58000)
    full = layers.with_frame(layers.frame[(layers.frame["role"] != "body") | (layers.frame["option"] == "full")]
                             .reset_index(drop=True))
    balanced = balance(full, stages=16, micro_batches=32, memory_mb=58000, chunks=2, schedule="interleaved",
                       objective="step", trainer="torchtitan")
    step, faster = checked.plan.simulate().step_time, balanced.simulate().step_time
    assert balanced.stages["layers"].tolist() == [5] * 16 and faster < step
    row = one_line(checked, "uneven_stage")
    assert row["severity"] == "warning"
    assert row["message"] == (
        "stage 1 holds 6 layers at 189 ms against 157 ms on the median stage; balanced with the same recompute "
        f"(layers per stage 5 x 16), the slowest stage takes 164 ms and the simulated step is "
        f"{1 - faster / step:.1%} faster ({faster:,.0f} ms against {step:,.0f} ms)")
    assert row["fix"] == ("move layers off that stage (Megatron --pipeline-model-parallel-layout; torchtitan "
                          "module_fqns_per_model_part; MindFormers offset): sappkit balance --objective step "
                          "--trainer torchtitan places them")


def test_an_uneven_stage_no_layout_improves_is_not_a_finding_and_one_that_does_is():
    # 8 layers on 4 stages, stage 1 holding 3 (one above the median stage)
    def check(layout):
        return check_config(["--num-layers", "8", "--pipeline-model-parallel-size", "4", "--global-batch-size",
                             "8", "--pipeline-model-parallel-layout", layout], tables.table(8), memory_mb=100_000)

    assert check("Ett|ttt|tt|tL").findings.empty  # the balancer's own layout: as fast as it gets
    row = one_line(check("Et|ttt|tt|ttL"), "uneven_stage")
    assert row["message"] == ("stage 1 holds 3 layers at 9 time units against 7.15 time units on the median stage; "
                              "balanced with the same recompute (layers per stage 2, 3, 2, 1), the slowest stage "
                              "takes 9 time units and the simulated step is 2.6% faster (84.8 time units against "
                              "87.1 time units)")

"""Step times from each trainer's log lines, written here in the trainers' own formats, warm-up skipped."""

import pytest

from sappkit import InputError
from sappkit.calibration import measured_step_ms, read_step_times

#: Megatron-LM's ``training_log`` line (megatron/training/training.py), one per --log-interval iterations.
MEGATRON = (" [2024-05-01 10:00:{i:02d}] iteration {i:8d}/  500000 | consumed samples: {s:12d} | elapsed time per "
            "iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 401.2 | learning rate: 1.500000E-04 | "
            "global batch size:   256 | lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.912 | number of "
            "skipped iterations:   0 | number of nan iterations:   0 |")
#: torchtitan's ``MetricsProcessor.log`` line (torchtitan/components/metrics.py), with its ANSI colours.
TORCHTITAN = ("[rank0]:[titan] 2025-03-01 10:00:00,000 - root - INFO - \x1b[31mstep: {i:2}  \x1b[32mloss:  2.3456  "
              "\x1b[38;2;180;60;0mgrad_norm:  0.9120  \x1b[33mmemory: 40.12GiB(50.66%)  \x1b[34mtps: {tps:,}  "
              "\x1b[36mtflops: 123.45  \x1b[35mmfu: 12.48%\x1b[39m")
#: NeMo 2's console line and the Lightning progress bar NeMo 1 prints, both with ``train_step_timing in s``.
NEMO = ("Training epoch 0, iteration {i}/149 | lr: 3e-05 | consumed_samples: {s} | global_batch_size: 256 | "
        "global_step: {i} | reduced_train_loss: 1.233 | train_step_timing in s: {sec:.4f}")
NEMO_BAR = ("Epoch 0: :   5%|▌         | {i}/200 [00:12<03:40, reduced_train_loss=3.090, global_step={i}.0, "
            "consumed_samples={s}, train_step_timing in s={sec:.3f}]")


def _steps(ms):
    """A warm-up of slow steps 1-10, then steps 11-20 around ``ms``."""
    return [(i, ms * (5 if i <= 10 else 1 + 0.01 * (i % 3 - 1))) for i in range(1, 21)]


@pytest.mark.parametrize("trainer, line", [("megatron", MEGATRON), ("nemo", NEMO), ("nemo", NEMO_BAR)])
def test_each_trainers_line_gives_the_median_step_after_the_warm_up(trainer, line):
    text = "\n".join(line.format(i=i, s=256 * i, ms=ms, sec=ms / 1e3) for i, ms in _steps(1234.0))
    frame = read_step_times(text)
    assert frame["trainer"].unique().tolist() == [trainer] and frame["step"].tolist() == list(range(11, 21))
    assert measured_step_ms(text) == pytest.approx(1234.0, rel=1e-3)
    assert measured_step_ms(text, warmup=0) > 1234.0 * 1.5


def test_torchtitan_tokens_per_second_become_step_times():
    tokens = 256 * 4096 / 64  # global batch x sequence over the devices
    text = "\n".join(TORCHTITAN.format(i=i, tps=round(tokens / (ms / 1e3))) for i, ms in _steps(2000.0))
    assert measured_step_ms(text, tokens_per_device=tokens) == pytest.approx(2000.0, rel=1e-3)
    with pytest.raises(InputError) as error:
        read_step_times(text)
    assert str(error.value) == ("the log: a torchtitan log gives tokens per second (tps); give tokens_per_device "
                                "(global batch x sequence length / devices) to turn it into step times")


def test_a_log_file_is_read_and_bad_logs_are_refused(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("\n".join(MEGATRON.format(i=i, s=i, ms=ms) for i, ms in _steps(500.0)))
    assert measured_step_ms(path) == pytest.approx(500.0, rel=1e-3)
    path.write_text("\n".join(MEGATRON.format(i=i, s=i, ms=ms) for i, ms in _steps(500.0)[:5]))
    with pytest.raises(InputError) as error:
        read_step_times(path)
    assert str(error.value) == (f"{path}: every step-time line is of a step <= warmup = 10 (the last is step 5); "
                                "log longer or lower warmup")
    path.write_text("hello\nworld\n")
    with pytest.raises(InputError) as error:
        read_step_times(path)
    assert str(error.value) == (f"{path}: no step-time line of megatron, torchtitan, nemo found (Megatron-LM's "
                                "'elapsed time per iteration (ms)', torchtitan's 'tps:', NeMo's 'train_step_timing "
                                "in s')")

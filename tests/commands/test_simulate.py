"""``sappkit simulate``: the stage frame, the saved figure, the files it reads."""

import matplotlib.pyplot as plt

from sappkit import read_layers_json
from sappkit.cli import main
from sappkit.demo import simulate_layers

LLAMA = "data/llama2_70b.json"


def test_cli_simulate_prints_the_stage_frame_and_saves_the_figure(tmp_path, capsys):
    figure = tmp_path / "sim.png"
    assert main(["simulate", LLAMA, "--stages", "4", "--micro-batches", "8", "--chunks", "2", "--schedule",
                 "interleaved", "--option", "full", "--limit-mb", "60000", "--save", str(figure)]) == 0
    out = capsys.readouterr().out.splitlines()
    sim = simulate_layers(read_layers_json(LLAMA), stages=4, micro_batches=8, schedule="interleaved", chunks=2,
                          option="full", limit_mb=60000)
    assert out[:4] == sim.describe().splitlines()
    assert out[4] == "stage  memory_mb  time per micro-batch (ms)  busy (ms)  idle (ms)"
    assert out[5].split() == ["0", f"{sim.stages.memory_mb[0]:,.0f}", f"{sim.stages.time[0]:,.0f}",
                              f"{sim.stages.busy_time[0]:,.0f}", f"{sim.stages.idle_time[0]:,.0f}"]
    assert len(out) == 4 + 1 + 4 + 1 and out[-1] == f"figure saved to {figure}"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.get_fignums() == []


def test_cli_simulate_reads_csv_and_refuses_other_files(tmp_path, capsys):
    from sappkit import write_layers_csv

    write_layers_csv(read_layers_json(LLAMA), tmp_path / "layers.csv")
    assert main(["simulate", str(tmp_path / "layers.csv"), "--stages", "2", "--micro-batches", "2"]) == 0
    assert capsys.readouterr().out.startswith("1f1b: 2 stages")
    assert main(["simulate", "layers.txt", "--stages", "2", "--micro-batches", "2"]) == 2
    assert capsys.readouterr().err == ("sappkit simulate: LAYERS must be a .json (MindFormers layer description) "
                                       "or .csv layer table; got 'layers.txt'\n")
    assert main(["simulate", LLAMA, "--stages", "4", "--micro-batches", "4", "--schedule", "dualpipev"]) == 2
    assert capsys.readouterr().err == ("sappkit simulate: chunks must be 2 for schedule 'dualpipev' (the V); "
                                       "got 1\n")


def test_cli_simulate_refuses_an_image_format_it_cannot_save_before_simulating(tmp_path, capsys):
    from matplotlib.backend_bases import FigureCanvasBase

    # The formats matplotlib saves depend on its version and Pillow's; the message lists those it has.
    formats = ", ".join(f".{name}" for name in sorted(FigureCanvasBase.get_supported_filetypes()))
    assert {".png", ".pdf", ".svg"} <= set(formats.split(", "))
    target = tmp_path / "sim.xyz"
    assert main(["simulate", LLAMA, "--stages", "2", "--micro-batches", "2", "--save", str(target)]) == 2
    assert capsys.readouterr() == ("", f"sappkit simulate: --save {str(target)!r} asks for image format 'xyz'; "
                                       f"expected a file ending in one of {formats}\n")
    assert main(["simulate", LLAMA, "--stages", "2", "--micro-batches", "2", "--save", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"sappkit simulate: {tmp_path}: cannot write (Is a directory); expected a "
                                       "writable file path\n")
    assert list(tmp_path.iterdir()) == []


def test_cli_simulate_refuses_a_step_too_long_to_simulate(capsys):
    assert main(["simulate", LLAMA, "--stages", "64", "--micro-batches", "65536"]) == 2
    assert capsys.readouterr().err == ("sappkit simulate: simulating 64 stages x 1 chunk(s) x 65536 micro-batches runs "
                                       "4,194,304 forward passes; sappkit simulates at most 1000000 "
                                       "(sappkit.limits.MAX_SIMULATED_PASSES): lower micro_batches\n")


def test_cli_refusals_name_the_fix_by_the_commands_flags(capsys):
    assert main(["simulate", LLAMA, "--stages", "4", "--micro-batches", "8", "--chunks", "2", "--schedule",
                 "1f1b"]) == 2
    assert capsys.readouterr().err == ("sappkit simulate: chunks must be 1 for schedule '1f1b'; got 2 (use --schedule "
                                       "interleaved)\n")

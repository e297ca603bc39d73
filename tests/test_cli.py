"""The command line's one error handler: one line on stderr and exit 2 for bad input and bad arguments, 130 for
Ctrl-C, and a quiet 141 when the reader of its output goes away (``| head``)."""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sappkit.cli import main

from .bundled import DATA
from .trainers.test_profiles import trace_view

ROOT = Path(__file__).resolve().parents[1]
#: Prints a 128-row stage frame with every column, three times what a one-page pipe holds (checked below): the
#: command must block on the pipe, or a signal sent "while it runs" could arrive after it has finished.
LONG_OUTPUT = ["simulate", str(DATA / "llama2_70b.json"), "--stages", "128", "--micro-batches", "128", "--wide"]
PIPE_BYTES = 4096


@pytest.mark.parametrize("arguments, message", [
    (["simulate", "x.json", "--stages", "four", "--micro-batches", "8"],
     "sappkit simulate: argument --stages: invalid int value: 'four' (see sappkit simulate --help)"),
    (["balance", "x.json", "--stages", "4"],
     "sappkit balance: the following arguments are required: --micro-batches, --memory (see sappkit balance --help)"),
    (["fit", "x.yaml", "--bogus"], "sappkit fit: unknown option '--bogus' (see sappkit fit --help)"),
    # A typo is named before the options it leaves missing, with the option it was meant to be.
    (["balance", "x.json", "--stages", "4", "--micro-batches", "8", "--memroy", "58000"],
     "sappkit balance: unknown option '--memroy'; did you mean --memory? (see sappkit balance --help)"),
    (["simulate", "x.json", "--stgaes=3"], "sappkit simulate: unknown option '--stgaes'; did you mean --stages? "
                                           "(see sappkit simulate --help)"),
    (["--bogus"], "sappkit: the following arguments are required: COMMAND (see sappkit --help)"),
])
def test_bad_arguments_are_one_line(capsys, arguments, message):
    with pytest.raises(SystemExit) as stop:
        main(arguments)
    assert stop.value.code == 2
    assert capsys.readouterr().err == message + "\n"


def test_simulate_takes_memory_as_every_other_command_does(capsys):
    base = ["simulate", LLAMA, "--stages", "16", "--micro-batches", "32", "--format", "json"]
    assert main([*base, "--memory", "58000"]) == 0
    by_memory = capsys.readouterr().out
    assert main([*base, "--limit-mb", "58000"]) == 0
    assert capsys.readouterr().out == by_memory
    assert '"limit_mb": 58000.0' in by_memory


@pytest.mark.parametrize("arguments", [["--help"], ["report", "--help"]])
def test_help_imports_no_model_it_does_not_show(arguments):
    """``sappkit --help`` lists the commands without importing them (each would bring pandas and its
    models); a command's own help imports that command only."""
    script = ("import sys\nfrom sappkit.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
              "print(sorted(name for name in sys.modules if name.startswith('sappkit.commands.')), file=sys.stderr)\n"
              "print('pandas' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", script, *arguments], capture_output=True, text=True, cwd=ROOT,
                          check=True)
    commands, pandas = done.stderr.splitlines()[-2:]
    if arguments == ["--help"]:
        assert (commands, pandas) == ("[]", "False")
        assert "search every parallel strategy a trainer accepts for the fastest step" in " ".join(done.stdout.split())
    else:
        assert commands == "['sappkit.commands._common', 'sappkit.commands.report']"


def test_a_message_with_a_line_break_stays_one_line(capsys, tmp_path):
    odd = tmp_path / "two\nlines.json"
    assert main(["simulate", str(odd), "--stages", "4", "--micro-batches", "8"]) == 2
    assert capsys.readouterr().err == (f"sappkit simulate: {tmp_path}/two\\nlines.json: no such file; expected a "
                                       "MindFormers layer description object\n")


def test_ctrl_c_is_one_line_and_130(capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("sappkit.commands.fit._run", interrupted)
    assert main(["fit", "x.yaml"]) == 130
    assert capsys.readouterr().err == "sappkit fit: interrupted\n"


def test_the_long_output_overflows_the_pipe(capsys):
    assert main(LONG_OUTPUT) == 0
    assert len(capsys.readouterr().out.encode()) > 3 * PIPE_BYTES


def _start(arguments):
    """``python -m sappkit`` writing unbuffered into a one-page pipe: the command blocks once it has printed a page,
    so it is still running, whatever the machine's speed, when the test acts on it."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)  # Linux: a one-page pipe, full after 4096 bytes
    process = subprocess.Popen([sys.executable, "-m", "sappkit", *arguments], stdout=write_end, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
    os.close(write_end)
    select.select([read_end], [], [])  # it has printed: it is inside the command, past the interpreter's start
    return process, read_end


def test_ctrl_c_in_a_subprocess():
    process, read_end = _start(LONG_OUTPUT)
    process.send_signal(signal.SIGINT)
    error = process.stderr.read()
    assert (process.wait(), error) == (130, "sappkit simulate: interrupted\n")
    os.close(read_end)


def test_a_closed_pipe_ends_quietly():
    process, read_end = _start(LONG_OUTPUT)
    assert os.read(read_end, 100).startswith(b"1f1b: 128 stages, 1 chunk(s), 128 micro-batches\n")
    os.close(read_end)  # as `head` does once it has its lines
    error = process.stderr.read()
    assert (process.wait(), error) == (141, "")


# --- what every sub-command prints on the bundled data ---------------------------------------------------------

LLAMA = str(DATA / "llama2_70b.json")
DEEPSEEK = str(DATA / "deepseek_v3.json")
LLAMA_PIPELINE = ["--stages", "16", "--micro-batches", "32", "--memory", "58000"]
DEEPSEEK_PIPELINE = ["--stages", "16", "--micro-batches", "32", "--memory", "70000"]
#: A MindSpore trace_view.json as its profiler writes one (tests/trainers/test_profiles.py builds it).
TRACE = Path(tempfile.gettempdir()) / f"sappkit-cli-trace-{os.getpid()}.json"
TRACE.write_text(json.dumps(trace_view()[0]))
atexit.register(TRACE.unlink, missing_ok=True)
#: A run of one's own to calibrate on: a Megatron-LM launch line and its log (tests/calibration has the formats).
RUN_CONFIG = Path(tempfile.gettempdir()) / f"sappkit-cli-run-{os.getpid()}.sh"
RUN_CONFIG.write_text("torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
                      "--num-attention-heads 32 --seq-length 4096 --tensor-model-parallel-size 8 "
                      "--micro-batch-size 1 --global-batch-size 64 --bf16\n")
RUN_LOG = RUN_CONFIG.with_suffix(".log")
RUN_LOG.write_text("\n".join(f" iteration {i:8d}/ 1000 | elapsed time per iteration (ms): 9000.0 |"
                              for i in range(1, 21)))
atexit.register(RUN_CONFIG.unlink, missing_ok=True)
atexit.register(RUN_LOG.unlink, missing_ok=True)
ONE_PARAMETER = ["--fix", "matmul_half_gflop=0.75", "hbm_efficiency=0.6125", "kernel_us=5", "intra_efficiency=0.75",
                 "inter_efficiency=0.86"]
#: Each sub-command on bundled data, as a newcomer would first run it.
RUNS = {
    "fit": [["fit", str(DATA / "llama2_70b_dryruns.csv")], ["fit", str(DATA / "llama2_70b_dryrun.yaml")],
            ["fit", str(DATA / "deepseek_v3_dryruns.csv")], ["fit", str(DATA / "vlm_dryruns.csv")]],
    "plan-dryruns": [["plan-dryruns", "--stages", "16", "--layers", "80", "--options", "none,selective,full"]],
    "balance": [["balance", LLAMA, *LLAMA_PIPELINE], ["balance", LLAMA, *LLAMA_PIPELINE, "--chunks", "2"]],
    "simulate": [["simulate", LLAMA, "--stages", "16", "--micro-batches", "32"],
                 ["simulate", LLAMA, "--stages", "16", "--micro-batches", "32", "--chunks", "2", "--schedule",
                  "interleaved", "--limit-mb", "58000"]],
    "choose": [["choose", LLAMA, *LLAMA_PIPELINE], ["choose", LLAMA, *LLAMA_PIPELINE, "--per-layer"],
               ["choose", DEEPSEEK, *DEEPSEEK_PIPELINE, "--per-layer"]],
    "alternatives": [["alternatives", LLAMA, *LLAMA_PIPELINE], ["alternatives", DEEPSEEK, *DEEPSEEK_PIPELINE]],
    "check-config": [["check-config", str(DATA / "megatron_llama2_70b.sh"), "--layers", LLAMA, "--memory", "58000"],
                     ["check-config", str(DATA / "torchtitan_llama2_70b.toml"), "--layers", LLAMA, "--memory",
                      "58000"]],
    "layers": [["layers", "--from-trace", str(TRACE), "--layer-pattern", r"(\d+)-LlamaDecodeLayer"]],
    "validate": [["validate"]],
    "calibrate": [["calibrate", f"{RUN_CONFIG},llama3-8b,{RUN_LOG}", *ONE_PARAMETER]],
    "bench-device": [["bench-device", "--repeats", "1", "--threads", "1"]],
    "search": [["search", "--model", "llama3-8b", "--devices", "64", "--global-batch", "256", "--seq-length", "4096"],
               ["search", "--model", "llama2-70b", "--from-config", str(DATA / "megatron_llama2_70b.sh"), "--dims",
                "t=8", "--dims", "p=16", "--dims", "cp=1", "--dims", "b=1", "--dims", "zero=1", "--compare",
                "t8 p16 v2"],
               ["search", "--model", "llama2-70b", "--from-config", str(DATA / "torchtitan_llama2_70b.toml"),
                "--dims", "t=8", "--dims", "p=16", "--dims", "cp=1", "--dims", "b=1", "--dims", "zero=3"]],
    "report": [["report"]],
    "demo": [["demo", "--no-report"]],
    "bench": [["bench", "--quick", "--only", "simulate", "fit"]],
}
#: The sub-commands that print tables, and so take --format.
TABLES = ("fit", "balance", "simulate", "choose", "alternatives", "check-config", "layers", "validate", "calibrate",
          "search", "bench")


@pytest.fixture
def quick(monkeypatch, demo):
    """The demo computed once, and a report writer that says what it would write without running notebooks."""
    def write_report(notebooks, out, *, progress=None, **options):
        for number, path in enumerate(notebooks, start=1):
            progress(f"notebook {number}/{len(notebooks)}: {Path(path).stem}, cell 1/20")
        return Path(out) / "index.html"

    monkeypatch.setattr("sappkit.report.write_report", write_report)
    monkeypatch.setattr("sappkit.commands.demo.run_demo", lambda: demo)


def test_the_commands_are_listed_in_the_order_of_the_work(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = [line.split()[0] for line in capsys.readouterr().out.split("commands:")[1].splitlines()[2:]
              if line.startswith("    ") and not line.startswith("     ")]
    assert listed == list(RUNS)


@pytest.mark.parametrize("command", ["", *RUNS])
def test_help_explains_every_option_in_plain_words(capsys, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "100")  # a 100-column terminal: argparse wraps its help to fit
    with pytest.raises(SystemExit):
        main([command, "--help"] if command else ["--help"])
    text = capsys.readouterr().out
    assert "seed" not in text.lower() and "``" not in text
    assert max(map(len, text.splitlines())) <= 100
    lines = text.splitlines() + [""]
    for number, line in enumerate(lines[:-1]):
        command_line = line.startswith("    ") and not line.startswith("     ") and line.split()[0] in RUNS
        if line.startswith("  -") or command_line:
            # Its help follows on its line, after two spaces, or on the next line, indented past the names.
            on_its_line = re.split(r"\s{2,}", line.strip(), maxsplit=1)[1:]
            assert on_its_line or lines[number + 1].startswith(" " * 12) and lines[number + 1].strip(), line


@pytest.mark.parametrize("command", list(RUNS))
def test_the_default_output_on_bundled_data_fits_100_columns(capsys, quick, command):
    for arguments in RUNS[command]:
        code = main(arguments)
        out, err = capsys.readouterr()
        assert code in (0, 1), err
        assert out and max(map(len, out.splitlines())) <= 100, arguments
        if command == "bench":
            assert err.splitlines() == ["bench 1/2: simulate", "bench 2/2: fit"]


def test_verbose_reads_the_gap_as_a_share(capsys):
    assert main(["balance", str(DATA / "llama2_70b.json"), "--stages", "4", "--micro-batches", "8", "--memory",
                 "70000", "--objective", "step", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"step objective 5,253 ms, gap \d+\.\d%, found by ", out) and not re.search(r"\d\.\d{4}", out)


@pytest.mark.parametrize("command", ["simulate", "choose", "alternatives"])
def test_less_memory_that_changes_nothing_is_said(capsys, command):
    shape = [command, str(DATA / "llama2_70b.json"), "--stages", "4", "--micro-batches", "8"]
    shape += [] if command == "simulate" else ["--memory", "70000"]
    assert main(shape) in (0, 1)
    plain = capsys.readouterr().out
    assert main([*shape, "--less-memory"]) in (0, 1)
    said = capsys.readouterr().out
    assert said.split() == ("note: --less-memory changes nothing here: it is the interleaved (or SeqPipe) order that "
                            "keeps fewer micro-batches in flight on early stages, and 1F1B already keeps p - s on "
                            "stage s").split() + plain.split()


def _empty_columns(out: str) -> list[str]:
    """Headers of the printed tables whose column holds only '-' (nothing)."""
    lines = out.splitlines()
    empty = []
    for start, header in enumerate(lines):
        if not header.startswith("stage  ") and not header.startswith("name  "):
            continue
        rows = []
        for line in lines[start + 1:]:
            if not line[:5].strip().isdigit() and not line.startswith(("const", "head", "tail", "param", "activ")):
                break
            rows.append(line.split())
        for column in range(len(rows[0]) if rows else 0):
            if all(len(row) > column and row[column] == "-" for row in rows):
                empty.append(header)
    return empty


def test_no_column_is_empty_on_every_row(capsys, quick):
    for command in ("fit", "balance", "simulate", "choose"):
        for arguments in RUNS[command]:
            main(arguments)
            assert _empty_columns(capsys.readouterr().out) == [], arguments


@pytest.mark.parametrize("command", TABLES)
def test_csv_and_json_parse(capsys, quick, command):
    import csv
    import io
    import json

    arguments = RUNS[command][0]
    assert main([*arguments, "--format", "csv"]) in (0, 1)
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and all(len(row) == len(rows[0]) for row in rows)
    assert main([*arguments, "--format", "json"]) in (0, 1)
    document = json.loads(capsys.readouterr().out)
    assert isinstance(document, dict) and document


@pytest.mark.parametrize("arguments", RUNS["choose"] + RUNS["alternatives"], ids=lambda a: " ".join(a[:1] + a[2:]))
def test_choose_and_alternatives_print_no_negative_time_saved(capsys, arguments):
    import json

    assert main(arguments) == 0
    out = capsys.readouterr().out
    assert "slower" not in out and "faster than the baseline" in out
    assert main([*arguments, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["time_saved"] >= 0 and document["step_time_saved"] >= 0
    assert document["baseline"] == ("every layer at selective, the fastest single option that fits (the configured "
                                    "recompute, every layer none, does not fit)")
    for stage in document.get("stages", []):
        assert stage["time_saved"] >= 0
    saved = [line for line in out.splitlines() if re.match(r"^\s+\d+\s", line)]
    if arguments[0] == "choose":
        assert out.split("summed over the stages: ")[1].split("\n")[0].endswith(" saved")
        assert saved and all(not line.split()[-1].startswith("-") for line in saved)


def test_one_plan_reads_the_same_in_balance_choose_and_alternatives(capsys, tmp_path):
    # The case: balance's plan, written as MindFormers YAML and read back by choose and alternatives.
    import json

    config = str(tmp_path / "plan.yaml")

    def run(*arguments) -> dict:
        assert main([*arguments, "--format", "json"]) == 0
        return json.loads(capsys.readouterr().out)

    balanced = run("balance", LLAMA, *LLAMA_PIPELINE, "--yaml", config)
    chosen = run("choose", LLAMA, *LLAMA_PIPELINE, "--offsets", config)
    walked = run("alternatives", LLAMA, *LLAMA_PIPELINE, "--offsets", config)
    assert chosen["baseline"] == walked["baseline"] == "the configured recompute"
    # One stage time: the tail's forward and backward count on stage 15 in every command.
    times = [stage["time"] for stage in balanced["stages"]]
    assert [stage["time"] for stage in chosen["stages"]] == pytest.approx(times, rel=1e-12)
    assert times[15] == pytest.approx(times[14] + 2.236962 + 4.473924, rel=1e-6)
    # The baseline is balance's plan, at balance's memory, beside the choice's.
    memory = [stage["memory_mb"] for stage in balanced["stages"]]
    assert [stage["baseline_memory_mb"] for stage in chosen["stages"]] == pytest.approx(memory, rel=1e-12)
    # The choice, no faster, moves each stage's selective layer to its end: 640 MB less on stages 0-3.
    moves = [(change["stage"], round(change["memory_change_mb"]), change["change"]) for change in chosen["changes"]]
    assert moves == [(0, -640, "selective moved from layer 1 to layer 4"),
                     (1, -640, "selective moved from layer 5 to layer 9"),
                     (2, -640, "selective moved from layer 10 to layer 14"),
                     (3, -640, "selective moved from layer 15 to layer 19")]
    assert walked["changes"] == chosen["changes"]
    # And in words, for people.
    assert main(["balance", LLAMA, *LLAMA_PIPELINE]) == 0
    assert "peak stage memory 56,657 MB on stage 1 of 58,000 MB" in capsys.readouterr().out.splitlines()
    for command in ("choose", "alternatives"):
        assert main([command, LLAMA, *LLAMA_PIPELINE, "--offsets", config]) == 0
        out = capsys.readouterr().out.splitlines()
        assert "against the baseline, 4 stages change:" in out
        assert "  stage 1: 56,657 MB -> 56,017 MB (-640 MB): selective moved from layer 5 to layer 9" in out
        assert any(line.startswith("peak 56,017 MB of 58,000 MB (stage 1; the baseline's: 56,657 MB on stage 1)")
                   for line in out)


def test_git_ignores_the_virtual_environment_contributing_sets_up():
    """``docs/contributing.md`` creates ``.venv``; it must not show up as files to commit."""
    assert "python3 -m venv .venv" in (ROOT / "docs" / "contributing.md").read_text()
    ignored = subprocess.run(["git", "check-ignore", "-q", ".venv/bin/python"], cwd=ROOT)
    assert ignored.returncode == 0

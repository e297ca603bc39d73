"""Fuzzing the command line: each sub-command with one argument replaced by a bad value or a bad file, in-process
and (a sample) in a subprocess. Bad input must end in one line on stderr and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sappkit.cli import main

from ..bundled import DATA
from .support import CASE_SECONDS, fresh, fuzz

ROOT = Path(__file__).resolve().parents[2]
LLAMA = str(DATA / "llama2_70b.json")
PIPELINE = ["--stages", "4", "--micro-batches", "8"]
#: Each sub-command's valid arguments; every option's value may be the one a case corrupts.
COMMANDS = {
    "simulate": [LLAMA, *PIPELINE, "--chunks", "1", "--p2p-time", "0.1", "--limit-mb", "70000", "--option", "full",
                 "--seq-split", "1"],
    "balance": [LLAMA, *PIPELINE, "--memory", "70000", "--level", "1", "--time-limit", "20", "--const-mb", "3000"],
    "choose": [LLAMA, *PIPELINE, "--memory", "70000", "--bucket-mb", "1", "--modes", "off,full", "--link-gbps", "50",
               "--time-unit-ms", "1"],
    "alternatives": [LLAMA, *PIPELINE, "--memory", "60000", "--dimensions", "dp=2,tp=4"],
    "fit": [str(DATA / "llama2_70b_dryrun.yaml")],
    "plan-dryruns": ["--stages", "8", "--layers", "64", "--options", "none,full", "--max-runs", "4"],
}
#: What a refusal of a corrupted option may name besides the option itself: the argument it becomes.
NAMES = {"--micro-batches": "micro_batches", "--memory": "memory_mb", "--level": "optimization_level",
         "--time-limit": "time_limit", "--const-mb": "const_mb", "--bucket-mb": "bucket_mb", "--link-gbps": "gbps",
         "--time-unit-ms": "time_unit_ms", "--p2p-time": "p2p_time", "--limit-mb": "limit_mb",
         "--seq-split": "seq_split", "--max-runs": "max_runs"}
VALUES = ["nan", "inf", "-inf", "-1", "0", "1", "1e999", "1.5", "x", "", " ", "99999999999999999999999", "2e9",
          "１", "off,off", ",", "tp=0", "full,zzz"]


@st.composite
def command_lines(draw, tmp_path: Path) -> tuple[list[str], list[str]]:
    """A sub-command's arguments with one replaced, and what a refusal may name."""
    command = draw(st.sampled_from(sorted(COMMANDS)))
    arguments = list(COMMANDS[command])
    index = draw(st.integers(0, len(arguments) - 1))
    flag = arguments[index - 1] if arguments[index - 1].startswith("--") else arguments[index]
    if arguments[index].startswith("--"):
        index += 1
    culprits = [flag, flag.lstrip("-").replace("-", "_"), NAMES.get(flag, flag)]
    if flag.startswith("--"):
        arguments[index] = draw(st.sampled_from(VALUES))
    else:  # the positional file
        bad = fresh(tmp_path) / draw(st.sampled_from(["none.json", "layers.json", "layers.csv", "dryruns.yaml"]))
        content = draw(st.sampled_from([None, b"\x00\xff binary", b"[[[[", b"{}", b"kind,role\nb,body\n",
                                        b"pipeline_config: [1\n"]))
        if content is not None:
            bad.write_bytes(content)
        arguments[index] = str(bad)
        culprits = [str(bad), "LAYERS", "FILE"]
    return [command, *arguments], culprits


def _one_line(code: int, error: str, culprits: list[str]) -> None:
    assert code in (0, 1, 2), (code, error)
    if code == 2:
        assert error.endswith("\n") and error.count("\n") == 1 and error.startswith("sappkit"), error
        assert any(culprit in error for culprit in culprits), (culprits, error)
    else:
        assert error == "" or "Warning" in error, error


@fuzz(40)
@given(data=st.data())
def test_in_process(tmp_path, capsys, data):
    argv, culprits = data.draw(command_lines(tmp_path))
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse refusing a value it parses itself
        code = stop.code
    _one_line(code, capsys.readouterr().err, culprits)


@fuzz(4)
@given(data=st.data())
def test_in_a_subprocess(tmp_path, data):
    argv, culprits = data.draw(command_lines(tmp_path))
    done = subprocess.run([sys.executable, "-m", "sappkit", *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=CASE_SECONDS, env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"})
    assert "Traceback" not in done.stderr, done.stderr
    _one_line(done.returncode, done.stderr, culprits)

"""The command line's one error handler: one line on stderr and exit 2 for bad input and bad arguments, 130 for
Ctrl-C, and a quiet 141 when the reader of its output goes away (``| head``)."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sappkit.cli import main

from .bundled import DATA

ROOT = Path(__file__).resolve().parents[1]
#: Prints a 64-row stage frame, several times what a one-page pipe holds.
LONG_OUTPUT = ["simulate", str(DATA / "llama2_70b.json"), "--stages", "64", "--micro-batches", "64"]


@pytest.mark.parametrize("arguments, message", [
    (["simulate", "x.json", "--stages", "four", "--micro-batches", "8"],
     "sappkit simulate: argument --stages: invalid int value: 'four' (see sappkit simulate --help)"),
    (["balance", "x.json", "--stages", "4"],
     "sappkit balance: the following arguments are required: --micro-batches, --memory (see sappkit balance --help)"),
    (["fit", "x.yaml", "--bogus"], "sappkit: unrecognized arguments: --bogus (see sappkit --help)"),
])
def test_bad_arguments_are_one_line(capsys, arguments, message):
    with pytest.raises(SystemExit) as stop:
        main(arguments)
    assert stop.value.code == 2
    assert capsys.readouterr().err == message + "\n"


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


def _start(arguments):
    """``python -m sappkit`` writing unbuffered into a one-page pipe: the command blocks once it has printed a page,
    so it is still running, whatever the machine's speed, when the test acts on it."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # Linux: a one-page pipe, full after 4096 bytes
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
    assert os.read(read_end, 100).startswith(b"1f1b: 64 stages, 1 chunk(s), 64 micro-batches\n")
    os.close(read_end)  # as `head` does once it has its lines
    error = process.stderr.read()
    assert (process.wait(), error) == (141, "")

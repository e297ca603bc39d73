"""Notebook execution: never a wait on an idle kernel, a dead kernel retried once then named in one line, and
files that are not notebooks refused before anything runs."""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import warnings
import sys
from pathlib import Path

import nbformat
import pytest
import zmq
import zmq.asyncio
from jupyter_client.session import Session
from nbclient import NotebookClient

from sappkit import InputError
from sappkit.cli import main
from sappkit.report.execution import _RequestChannel, execute_notebook, idle_waits, read_notebook
from sappkit.widgets.offline import REPORT_ENV

new_code, new_markdown = nbformat.v4.new_code_cell, nbformat.v4.new_markdown_cell
REPO = Path(__file__).resolve().parents[2]

#: Seconds a cell may take beyond the kernel's own work on it (the messages' way there and back take hundredths;
#: the stall this guards against waited for the cell's whole timeout).
IDLE_WAIT_LIMIT_S = 5.0
#: A cell timeout far above any cell's work here, so a stall shows as a long idle wait, not as a timeout error.
CELL_TIMEOUT_S = 30


def test_a_request_sent_while_a_reply_waits_wakes_the_poll_for_it():
    """The mechanism of the stall, on two bare sockets: the reply arrives, the client sends a widget update on the
    same socket before its event loop looked, and the poll waiting for the reply must still wake up."""
    session = Session(key=b"secret")

    async def scenario() -> bool:
        context, kernel_context = zmq.asyncio.Context(), zmq.Context()
        client = context.socket(zmq.DEALER)
        kernel = kernel_context.socket(zmq.ROUTER)
        port = kernel.bind_to_random_port("tcp://127.0.0.1")
        client.connect(f"tcp://127.0.0.1:{port}")
        channel = _RequestChannel(client, session)
        try:
            channel.send(session.msg("execute_request", {"code": "1"}))
            ident, *_ = kernel.recv_multipart()
            waiting = asyncio.ensure_future(channel.get_msg(timeout=60))
            await asyncio.sleep(0)
            client.get(zmq.EVENTS)  # nothing is due yet: clears the socket's signal so the next one is the reply's
            reply = session.msg("execute_reply", {"status": "ok"})
            kernel.send_multipart([ident, *session.serialize(reply)])
            select.select([client.FD], [], [], 30)  # the reply is in (without letting the event loop see it) ...
            channel.send(session.msg("comm_msg", {"comm_id": "output", "data": {}}))  # ... as a widget update goes
            for _ in range(20):
                await asyncio.sleep(0)
            woke = waiting.done() and waiting.result()["header"]["msg_id"] == reply["header"]["msg_id"]
            waiting.cancel()
            return woke
        finally:
            client.close(linger=0)
            kernel.close(linger=0)
            context.term()
            kernel_context.term()

    assert asyncio.run(scenario())


def _dashboard_run(name: str, folder: Path, times: int) -> Path:
    """The repository notebook ``name`` with its last cell (the dashboard) run ``times`` times, beside the data."""
    nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
    dashboard = nb.cells[-1]
    assert dashboard.cell_type == "code" and "Dashboard" in dashboard.source, f"{name}: last cell is no dashboard"
    nb.cells += [new_code(dashboard.source) for _ in range(times - 1)]
    (folder / "notebooks").mkdir(exist_ok=True)
    if not (folder / "data").exists():
        (folder / "data").symlink_to(REPO / "data")
    path = folder / "notebooks" / name
    nbformat.write(nb, path)
    return path


@pytest.mark.slow  # runs the notebooks themselves, as the notebook lane does
@pytest.mark.parametrize("name", ["03_recompute.ipynb", "04_alternatives.ipynb"])
def test_dashboards_never_wait_on_an_idle_kernel(name, tmp_path):
    """Each dashboard notebook once, then its dashboard nine times more in the same kernel.

    Before the fix a dashboard run waited for the cell's whole timeout now
    and then (its Output widget sends updates as the reply arrives): one
    run in nine in the issue, one in four on a busy machine here. Twenty
    runs catch that with a probability of 0.9 to 0.997, for about a
    notebook and a half of time per dashboard (a fresh kernel per run would
    cost ten notebooks); the Output-widget test below catches the mechanism
    itself all but surely.
    """
    nb = execute_notebook(_dashboard_run(name, tmp_path, times=10), timeout_s=CELL_TIMEOUT_S)
    waits = idle_waits(nb)
    assert len(waits) == sum(cell.cell_type == "code" for cell in nb.cells)
    slow = {cell: wait for cell, wait in waits.items() if wait > IDLE_WAIT_LIMIT_S}
    assert not slow, f"{name}: cells waited on an idle kernel (cell: seconds beyond the kernel's work): {slow}"


def test_output_widget_updates_never_leave_a_cell_waiting(tmp_path):
    """The sharpest form of the stall: a cell writing a large output into an Output widget, ten times.

    The client is still taking the output in (and sending it back to the
    kernel) when the reply arrives; before the fix 60 of 72 such executions
    waited for the cell's whole timeout, so ten all but surely catch it.
    """
    path = tmp_path / "output_widget.ipynb"
    write = 'out.clear_output(wait=True)\nwith out:\n    display({"text/plain": "x" * 1_000_000}, raw=True)'
    nbformat.write(nbformat.v4.new_notebook(cells=[
        new_code("import ipywidgets\nfrom IPython.display import display\nout = ipywidgets.Output()\ndisplay(out)"),
        *[new_code(write) for _ in range(10)]]), path)
    waits = idle_waits(execute_notebook(path, timeout_s=CELL_TIMEOUT_S))
    assert len(waits) == 11
    slow = {cell: wait for cell, wait in waits.items() if wait > IDLE_WAIT_LIMIT_S}
    assert not slow, f"cells waited on an idle kernel (cell: seconds beyond the kernel's work): {slow}"


_DIE = "import os, signal\nfrom pathlib import Path\n{condition}\n    os.kill(os.getpid(), signal.SIGKILL)"


def _dying_notebook(folder: Path, condition: str) -> Path:
    path = folder / "dies.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[
        new_markdown("# Dies"), new_code("x = 6 * 7"), new_code(_DIE.format(condition=condition)),
        new_code("print(x)")]), path)
    return path


@pytest.mark.slow  # starts and kills kernels
def test_a_kernel_that_dies_once_is_replaced_and_the_notebook_run_again(tmp_path):
    path = _dying_notebook(tmp_path, "if not Path('died').exists():\n    Path('died').touch()")
    lines = []
    nb = execute_notebook(path, progress=lines.append)
    assert nb.cells[3].outputs[0]["text"] == "42\n"
    assert lines == ["cell 2/4", "cell 3/4",
                     "the kernel died at cell 3/4; running the notebook again in a fresh kernel",
                     "cell 2/4", "cell 3/4", "cell 4/4"]


@pytest.mark.slow  # starts and kills kernels
def test_a_kernel_that_dies_twice_is_named_in_one_line(tmp_path, capsys, monkeypatch):
    """Even when nbclient's clean-up then fails in turn (it once ended a report in an AssertionError of its own)."""
    cleanup = NotebookClient._async_cleanup_kernel

    async def failing_cleanup(client):
        await cleanup(client)
        raise AssertionError("clean-up after a dead kernel")

    monkeypatch.setattr(NotebookClient, "_async_cleanup_kernel", failing_cleanup)
    path = _dying_notebook(tmp_path, "if True:")
    out = tmp_path / "new" / "report"
    assert main(["report", "--notebooks", str(path), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"sappkit report: notebook {str(path)!r} failed at cell 3 of 4 ('import os, signal'): "
                            f"DeadKernelError: the kernel died, again after a restart; no report was written (run "
                            f"the notebook in JupyterLab to see the traceback)\n")
    assert "notebook 1/1: dies, the kernel died at cell 3/4; running the notebook again in a fresh kernel" in (
        captured.out.splitlines())
    assert sorted(path.name for path in tmp_path.iterdir()) == ["dies.ipynb"]


@pytest.mark.slow  # waits for a kernel that never comes
def test_a_kernel_that_never_starts_is_named_in_one_line_and_nothing_after_it(tmp_path):
    """The whole program's stderr, exit included: nbclient left an exit-time clean-up behind that ended in an
    AssertionError traceback after the message."""
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text("import os\nos._exit(3)\n")
    path = tmp_path / "plain.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[new_code("1")]), path)
    done = subprocess.run([sys.executable, "-m", "sappkit", "report", "--notebooks", str(path), "--out",
                           str(tmp_path / "report")], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "IPYTHONDIR": str(tmp_path / "ipython")})
    assert (done.returncode, done.stderr) == (2, (
        f"sappkit report: notebook {str(path)!r} failed before its first cell: RuntimeError: Kernel died before "
        f"replying to kernel_info; no report was written (run the notebook in JupyterLab to see the traceback)\n"))
    assert done.stdout.splitlines() == [
        "notebook 1/1: plain, starting its kernel",
        ("notebook 1/1: plain, the kernel did not start (Kernel died before replying to kernel_info); running the "
         "notebook again in a fresh kernel")]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ipython", "plain.ipynb"]


def test_a_cell_whose_display_fails_fails_the_notebook(tmp_path):
    """IPython shows a failed display as an error output and the cell still succeeds: a report must not show it."""
    path = tmp_path / "states.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[
        new_markdown("# States"),
        new_code("class States:\n    def _repr_mimebundle_(self, **kwargs):\n        raise ValueError('no plan')\n"
                 "States()"),
        new_code("print('never runs')")]), path)
    with pytest.raises(InputError) as raised:
        execute_notebook(path)
    assert str(raised.value) == (f"notebook {str(path)!r} failed at cell 2 of 3 ('class States:'): ValueError: no "
                                 f"plan; no report was written (run the notebook in JupyterLab to see the traceback)")


@pytest.mark.parametrize(("for_report", "parent", "seen"), [(True, None, "1"), (False, "1", "None"),
                                                             (False, None, "None")])
def test_the_kernel_knows_whether_it_runs_for_a_report(tmp_path, monkeypatch, for_report, parent, seen):
    if parent is None:
        monkeypatch.delenv(REPORT_ENV, raising=False)
    else:
        monkeypatch.setenv(REPORT_ENV, parent)
    path = tmp_path / "env.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[new_code(f"import os\nprint(os.environ.get({REPORT_ENV!r}))")]),
                   path)
    assert execute_notebook(path, for_report=for_report).cells[0].outputs[0]["text"] == f"{seen}\n"


def _notebook_json(**changes) -> str:
    nb = json.loads(nbformat.writes(nbformat.v4.new_notebook(cells=[new_code("1")])))
    nb["cells"][0]["id"] = "one"  # a fixed id, so the test's parameters are the same in every process that collects
    nb.update(changes)
    return json.dumps(nb)


@pytest.mark.parametrize(("text", "reason"), [
    ("", "not JSON: Expecting value: line 1 column 1 (char 0)"),
    ('{"cells": [', "not JSON: Expecting value: line 1 column 12 (char 11)"),
    ("[]", 'expected a JSON object with an "nbformat" key; got an array'),
    ('"notes"', 'expected a JSON object with an "nbformat" key; got a string'),
    ('{"cells": []}', 'expected a JSON object with an "nbformat" key; got an object without one'),
    (_notebook_json(nbformat=5), "nbformat 5; expected one of 1, 2, 3, 4"),
    (_notebook_json(nbformat="4"), "nbformat '4'; expected one of 1, 2, 3, 4"),
    (_notebook_json(nbformat=[4]), "nbformat [4]; expected one of 1, 2, 3, 4"),
    (_notebook_json(cells=[{"cell_type": "code", "metadata": {}, "outputs": [], "id": "a"}]),
     "at cells[0]: 'source' is a required property"),
    (_notebook_json(metadata=[]), "at metadata: [] is not of type 'object'"),
    (_notebook_json(cells=3), "'int' object is not iterable"),
])
def test_files_that_are_not_notebooks_are_named_with_the_reason(tmp_path, text, reason):
    path = tmp_path / "bad.ipynb"
    path.write_text(text)
    with pytest.raises(InputError) as raised:
        read_notebook(path)
    assert str(raised.value) == f"notebooks: {str(path)!r} is not a Jupyter notebook ({reason})"


def test_unreadable_notebooks_are_named(tmp_path):
    binary = tmp_path / "binary.ipynb"
    binary.write_bytes(b"\xff\xfe{}")
    with pytest.raises(InputError) as raised:
        read_notebook(binary)
    assert str(raised.value) == (f"notebooks: cannot read {str(binary)!r} as a notebook ('utf-8' codec can't "
                                 f"decode byte 0xff in position 0: invalid start byte)")


def test_report_refuses_a_bad_notebook_before_running_any(tmp_path, capsys):
    good = tmp_path / "good.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[new_code("open('ran', 'w').close()")]), good)
    bad = tmp_path / "bad.ipynb"
    bad.write_text("[]")
    assert main(["report", "--notebooks", str(good), str(bad), "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (f"sappkit report: notebooks: {str(bad)!r} is not a Jupyter notebook "
                                       f'(expected a JSON object with an "nbformat" key; got an array)\n')
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bad.ipynb", "good.ipynb"]


def test_idle_waits_leave_out_cells_that_did_not_run():
    nb = nbformat.v4.new_notebook(cells=[new_markdown("# T"), new_code("1", metadata={"execution": {}})])
    assert idle_waits(nb) == {}



@pytest.mark.parametrize(("cell", "error"), [
    ({"cell_type": "markdown", "metadata": {}, "source": "# Notes"}, None),
    ({"cell_type": "code", "metadata": {}, "outputs": []}, "at cells[0]: 'source' is a required property"),
])
def test_notebooks_without_cell_ids_say_nothing_but_the_result(tmp_path, capsys, cell, error):
    path = tmp_path / "no_ids.ipynb"
    path.write_text(_notebook_json(nbformat_minor=5, cells=[cell]))  # v4.5 asks for ids; editors add them
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        code = main(["report", "--notebooks", str(path), "--out", str(tmp_path / "r")])
    assert [str(w.message) for w in warned] == []
    if error is None:
        assert code == 0 and capsys.readouterr().err == ""  # progress goes to stdout
    else:
        assert code == 2
        assert capsys.readouterr().err == (f"sappkit report: notebooks: {str(path)!r} is not a Jupyter notebook "
                                           f"({error})\n")

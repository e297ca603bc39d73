"""Notebooks executed in a fresh kernel without ever waiting on an idle one.

:func:`execute_notebook` runs a notebook top to bottom with nbclient in a
kernel of this Python environment, says which cell it is at, retries once in
a fresh kernel when the kernel dies or does not start, and names the
notebook and the cell in one line when it fails. :func:`idle_waits` reads
back, per cell, how long the client waited beyond the kernel's work;
:func:`read_notebook` refuses a file that is not a notebook, saying why.

Why a client used to wait on an idle kernel: nbclient's stand-in for the
Output widget sends each output it receives back to the kernel (a
``comm_msg`` on the shell channel), and jupyter_client's ``Session.send``
sends on a blocking *shadow* of the client's asyncio shell socket. Sending
makes libzmq process the socket's pending commands, among them the signal
that the cell's ``execute_reply`` has just arrived; that signal is
edge-triggered and the asyncio socket never hears of it, so the client's
poll for the reply sleeps until the cell's timeout, then finds the reply
and carries on (jupyter/nbclient#312). Dashboard cells print and plot into
Output widgets, so they lost that race now and then, more often on a busy
machine. Here the client's request channels send through the asyncio socket
itself, which looks for replies waiting behind every send.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import nbformat
import zmq
from ipykernel.kernelspec import RESOURCES, get_kernel_dict
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import ensure_async
from nbclient import NotebookClient
from nbclient.exceptions import CellControlSignal, CellExecutionError, DeadKernelError
from nbformat.warnings import MissingIDFieldWarning
from traitlets import Type, default

from ..errors import InputError
from ..widgets.offline import REPORT_ENV

__all__ = ["execute_notebook", "idle_waits", "read_notebook"]

#: Keys of a cell's execution metadata (beside nbclient's, from the kernel's messages) for when the client sent the
#: cell and when it held the cell's reply and outputs.
SENT_KEY, DONE_KEY = "sappkit.client.sent", "sappkit.client.done"
_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
               type(None): "null"}


def read_notebook(path: str | os.PathLike):
    """The notebook at ``path`` (as nbformat 4), or an :class:`~sappkit.InputError` saying why it is not one.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder) / "list.ipynb"
    ...     _ = path.write_text("[1, 2]")
    ...     try:
    ...         read_notebook(path)
    ...     except InputError as error:
    ...         print(str(error).replace(folder, "DIR"))
    notebooks: 'DIR/list.ipynb' is not a Jupyter notebook (expected a JSON object with an "nbformat" key; got an array)
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"notebooks: cannot read {str(path)!r} as a notebook ({exc})") from None
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise InputError(f"notebooks: {str(path)!r} is not a Jupyter notebook (not JSON: {exc})") from None
    if not isinstance(found, dict) or "nbformat" not in found:
        got = "an object without one" if isinstance(found, dict) else _JSON_TYPES[type(found)]
        raise InputError(f"notebooks: {str(path)!r} is not a Jupyter notebook (expected a JSON object with an "
                         f'"nbformat" key; got {got})')
    if not (type(found["nbformat"]) is int and found["nbformat"] in nbformat.versions):
        raise InputError(f"notebooks: {str(path)!r} is not a Jupyter notebook (nbformat {found['nbformat']!r}; "
                         f"expected one of {', '.join(map(str, nbformat.versions))})")
    try:
        with warnings.catch_warnings():
            # A v4.5 notebook without cell ids is one Jupyter opens as it is: nbformat gives the cells ids on
            # reading, and its warning that it did would only reach the terminal ahead of the result.
            warnings.simplefilter("ignore", MissingIDFieldWarning)
            nbformat.validate(nbformat.from_dict(found))  # as written: its schema's words beat a conversion's error
            nb = nbformat.reads(text, as_version=4)
            nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001 - nbformat reports malformed notebooks with whatever its code trips on
        reason = getattr(exc, "message", None) or str(exc).strip().splitlines()[0] or type(exc).__name__
        where = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in getattr(exc, "absolute_path", ()))
        reason = f"at {where.lstrip('.')}: {reason}" if where else reason
        raise InputError(f"notebooks: {str(path)!r} is not a Jupyter notebook ({_shorten(reason, 120)})") from None
    return nb


def execute_notebook(path: str | os.PathLike, *, timeout_s: int = 600, for_report: bool = False,
                     progress: Callable[[str], None] | None = None):
    """Run the notebook at ``path`` top to bottom and return the executed notebook (the file is untouched).

    The kernel is this Python environment's, whatever kernelspecs are
    installed; the working directory is the notebook's folder; the widgets'
    state is stored in the notebook's metadata. ``for_report`` sets
    :data:`~sappkit.widgets.offline.REPORT_ENV` in the kernel's environment,
    on which the dashboards add their precomputed states to their display
    (a few seconds to a minute per dashboard). ``progress`` is called with
    ``"cell 3/20"`` as each code cell starts. A kernel that dies (or does not
    start) is replaced once and the notebook run again from the top. A
    failing (or, after ``timeout_s``, hanging) cell, a cell that shows an
    error (a display that failed), or a kernel lost twice, raises
    :class:`~sappkit.InputError` naming the notebook, the cell (counted from
    1, markdown included) and the error.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder) / "answer.ipynb"
    ...     nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("6 * 7")]), path)
    ...     execute_notebook(path, progress=print).cells[0].outputs[0]["data"]["text/plain"]
    cell 1/1
    '42'
    """
    path = Path(path)
    say = progress or (lambda line: None)
    env = {**os.environ, REPORT_ENV: "1"} if for_report else {k: v for k, v in os.environ.items() if k != REPORT_ENV}
    for retry in (False, True):
        nb = read_notebook(path)
        client = _NotebookRun(
            nb, progress=say, timeout=timeout_s, kernel_name="python3", kernel_manager_class=_KernelManager,
            store_widget_state=True, resources={"metadata": {"path": str(path.resolve().parent)}},
        )
        try:
            return client.execute(env=env)
        except CellControlSignal as exc:
            raise InputError(_failure_message(path, nb, client.current, exc)) from None
        except Exception as exc:
            # after a death, nbclient's clean-up may fail in turn (and replace the DeadKernelError): the death counts
            if not (client.kernel_lost or isinstance(exc, DeadKernelError)):
                raise
            if client.current is None:
                lost, error = f"the kernel did not start ({_first_line(exc)})", exc
            else:
                lost = f"the kernel died at {_cell_name(nb, client.current)}"
                error = DeadKernelError("the kernel died, again after a restart")
            if retry:
                raise InputError(_failure_message(path, nb, client.current, error)) from None
            say(f"{lost}; running the notebook again in a fresh kernel")


def idle_waits(nb) -> dict[int, float]:
    """Seconds the client waited on each executed cell beyond the kernel's work on it, by cell number (from 1).

    The client's wall time from sending the cell to holding its reply and
    outputs, less the time the kernel reported itself busy with it (the
    timestamps of its status messages). A few hundredths of a second are the
    messages' way there and back; more is a client waiting on an idle kernel.
    Cells :func:`execute_notebook` did not run are left out.

    Examples
    --------
    >>> cell = nbformat.v4.new_code_cell("6 * 7", metadata={"execution": {
    ...     SENT_KEY: "2026-01-01T00:00:00.000Z", "iopub.status.busy": "2026-01-01T00:00:00.050Z",
    ...     "iopub.status.idle": "2026-01-01T00:00:01.550Z", DONE_KEY: "2026-01-01T00:00:01.750Z"}})
    >>> idle_waits(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"), cell]))
    {2: 0.25}
    """
    waits = {}
    for number, cell in enumerate(nb.cells, start=1):
        timing = cell.get("metadata", {}).get("execution", {})
        if DONE_KEY in timing:
            wall = _seconds(timing[DONE_KEY]) - _seconds(timing[SENT_KEY])
            busy = _seconds(timing["iopub.status.idle"]) - _seconds(timing["iopub.status.busy"])
            waits[number] = round(wall - busy, 3)
    return waits


class _RequestChannel(AsyncZMQSocketChannel):
    """A channel the client sends requests on, sending through its asyncio socket.

    ``Session.send`` would send on a blocking shadow of the socket, which can
    swallow the wake-up of a poll waiting on it (see the module docstring);
    the asyncio socket's own send checks for messages that poll is waiting for.
    """

    def send(self, msg: dict) -> None:
        # Session.send shadows zmq.asyncio sockets only: hand it the asyncio socket's send behind another face
        self.session.send(SimpleNamespace(send_multipart=self.socket.send_multipart), msg)


class _KernelClient(AsyncKernelClient):
    shell_channel_class = Type(_RequestChannel)
    control_channel_class = Type(_RequestChannel)
    stdin_channel_class = Type(_RequestChannel)


class _KernelManager(AsyncKernelManager):
    """A kernel manager whose ``python3`` is always this interpreter (an installed kernelspec may not be).

    Its sockets are CurveZMQ-encrypted when pyzmq supports it, as ipykernel
    asks (it warns on stderr about a plain TCP kernel); its clients send
    through their asyncio sockets (:class:`_RequestChannel`).
    """

    @default("transport_encryption")
    def _encrypt_when_possible(self):
        return "auto" if zmq.has("curve") else "disabled"

    @default("client_factory")
    def _fixed_client(self):
        return _KernelClient

    @property
    def kernel_spec(self):
        return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())


class _NotebookRun(NotebookClient):
    """nbclient saying which code cell it starts, timing each cell, and remembering whether (and where) it lost the
    kernel.

    After the last cell it waits for the kernel to answer one more request:
    the kernel handles the client's widget updates first, so the interrupt
    the shutdown sends finds it idle (instead of logging "KeyboardInterrupt
    caught in kernel" from inside a handler).
    """

    def __init__(self, nb, *, progress: Callable[[str], None], **kwargs):
        super().__init__(nb, **kwargs)
        self.progress = progress
        self.current: int | None = None
        self.kernel_lost = False

    @contextlib.asynccontextmanager
    async def async_setup_kernel(self, **kwargs):
        started = False
        try:
            async with super().async_setup_kernel(**kwargs):
                started = True
                yield
        except RuntimeError:
            # nbclient's words for a kernel that died or went silent before its first reply
            self.kernel_lost = self.kernel_lost or not started
            raise
        finally:
            if self.km is None:
                # a failed start leaves nbclient's exit-time clean-up registered with nothing left to clean: it would
                # end the program in an AssertionError traceback
                atexit.unregister(self._cleanup_kernel)

    async def async_execute_cell(self, cell, cell_index: int, execution_count: int | None = None,
                                 store_history: bool = True):
        self.current = cell_index
        if cell.cell_type == "code" and cell.source.strip():
            self.progress(_cell_name(self.nb, cell_index))
        sent = _now()
        try:
            cell = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except CellControlSignal:
            raise
        except Exception as exc:
            # a dying kernel can surface as DeadKernelError or as whatever broke in the client when it went
            self.kernel_lost = isinstance(exc, DeadKernelError) or not await ensure_async(self.km.is_alive())
            raise
        shown_error = next((output for output in cell.get("outputs", ()) if output.output_type == "error"), None)
        if shown_error is not None:
            # the cell ran, but shows a traceback: a display that failed (a dashboard's precomputed states, say)
            raise CellExecutionError("", shown_error.ename, shown_error.evalue)
        timing = cell.metadata.get("execution", {})
        if "iopub.status.idle" in timing:
            timing.update({SENT_KEY: sent, DONE_KEY: _now()})
        if cell_index == len(self.nb.cells) - 1:
            await self.async_wait_for_reply(await ensure_async(self.kc.kernel_info()))
        return cell


def _cell_name(nb, index: int) -> str:
    return f"cell {index + 1}/{len(nb.cells)}"


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else "no message"


def _failure_message(path: Path, nb, index: int | None, exc: Exception) -> str:
    if index is None:
        where = "before its first cell"
    else:
        first_line = next((text for text in nb.cells[index].source.splitlines() if text.strip()), "")
        where = f"at cell {index + 1} of {len(nb.cells)} ({_shorten(first_line, 60)!r})"
    if hasattr(exc, "ename"):
        error = f"{exc.ename}: {exc.evalue}"
    else:
        error = f"{type(exc).__name__}: {_first_line(exc)}"
    return (f"notebook {str(path)!r} failed {where}: {error}; no report was written (run the notebook in "
            f"JupyterLab to see the traceback)")


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _now() -> str:
    """The time in the format of the kernel's message timestamps as nbclient records them."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(stamp: str) -> float:
    """A message timestamp as nbclient records it (ISO 8601, ``Z`` for UTC) in seconds since the epoch."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

"""``sappkit.bench``'s CPU clock: it counts the children still running (a pool's workers, a kernel) as well as
those that exited, and every row carries its CPU and the load average."""

import subprocess
import sys

from sappkit.bench import COLUMNS, cpu_seconds, row, run

#: A child that spends 0.3 s of its own CPU, says so, then waits (alive) until its stdin closes.
SPIN = ("import sys, time\nstart = time.process_time()\nwhile time.process_time() - start < 0.3:\n    pass\n"
        "print('spun', flush=True)\nsys.stdin.read()\n")


def test_cpu_seconds_counts_a_child_that_is_still_running():
    before = cpu_seconds()
    child = subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "spun\n"
        live = cpu_seconds() - before
    finally:
        child.stdin.close()
        child.wait()
    exited = cpu_seconds() - before
    assert live >= 0.3  # rusage alone would not see it before it exits
    assert exited >= live - 0.05  # once waited for, it is counted once, as an exited child


def test_every_row_carries_its_cpu_and_the_load():
    made = row("x", "a case", 0.5, 100.0, cpu_s=1.25)
    assert list(made) == list(COLUMNS)
    assert made["cpu_s"] == 1.25 and made["median_ms"] == 500.0 and made["passed"] is False
    assert made["load"] >= 0
    table = run(quick=True, only=("startup",))
    assert table["case"].tolist() == ["sappkit --help", "sappkit report --help", "sappkit balance --help"]
    assert (table["cpu_s"] > 0).all()  # the child interpreters' CPU, read once they exit
    # sappkit --help imports no command, so it costs less than a command's own help
    assert table["cpu_s"].iloc[0] < table["cpu_s"].iloc[2]


def test_a_target_is_met_on_the_cpu_a_call_costs_not_on_a_loaded_machines_wall_time():
    """Issue 39 item 9: a call that waits 30 ms (as on a loaded machine) but computes for none meets a 20 ms
    target, and one that computes for 30 ms misses it; the detail says which CPU time met the target."""
    import time

    from sappkit.bench import median_seconds

    waited = row("x", "waits", median_seconds(lambda: time.sleep(0.03), repeats=3), 20.0)
    assert waited["median_ms"] >= 30.0 and waited["passed"] is True and "ms of CPU against 20" in waited["detail"]

    def spin():
        start = time.process_time()
        while time.process_time() - start < 0.03:
            pass

    assert row("x", "computes", median_seconds(spin, repeats=3), 20.0)["passed"] is False
    # a row takes the CPU its own median_seconds measured, once: the next row without one compares median_ms
    assert row("x", "no call timed", 0.01, 20.0)["passed"] is True
    assert row("x", "stated", 0.5, 100.0, cpu_ms=60.0)["passed"] is True

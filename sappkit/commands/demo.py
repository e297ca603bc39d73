"""``sappkit demo``: the main job on bundled data, with its headline numbers."""

from __future__ import annotations

from ..demo import run_demo


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="run the main job on bundled data and print the headline numbers")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    print(run_demo().describe())
    return 0

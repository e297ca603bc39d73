"""MkDocs hook: the command-line reference, generated from sappkit's argparse parsers when the site is built.

``docs/cli.md`` holds a marker line; the hook replaces it with each sub-command's ``--help``, in the order
``sappkit --help`` lists them, so the reference cannot drift from the parsers (tests/test_docs.py checks that
the page's table names every sub-command).
"""

from __future__ import annotations

import argparse

MARKER = "<!-- the sub-commands' --help, generated -->"
#: The width help text is wrapped to (argparse reads COLUMNS).
WIDTH = 100


def subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every sub-command's parser, by name, in the order ``sappkit --help`` lists them."""
    from sappkit.cli import build_parser

    actions = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(actions[0].choices)


def reference() -> str:
    """Markdown: a section per sub-command with its ``--help`` as a code block."""
    import os

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        sections = [f"## sappkit {name}\n\n```text\n{parser.format_help().rstrip()}\n```\n"
                    for name, parser in subcommand_parsers().items()]
    finally:
        if previous is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(sections)


def on_page_markdown(markdown: str, page, **_) -> str:
    """Put the generated reference where ``docs/cli.md`` has the marker."""
    if page.file.src_uri == "cli.md":
        return markdown.replace(MARKER, reference())
    return markdown

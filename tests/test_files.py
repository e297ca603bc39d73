"""The one reader and writer of files every public reader and writer shares: paths that are not paths, folders,
binary files, other encodings, documents that nest too deeply, alias bombs, parse errors on several lines, output
paths that cannot be written."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from sappkit import (
    InputError, read_dryrun_csv, read_dryrun_logs, read_dryrun_yaml, read_layers_csv, read_layers_json,
    write_layers_csv, write_layers_json,
)

from .bundled import DATA

READERS = {
    "read_layers_json": (read_layers_json, "path", "a MindFormers layer description object"),
    "read_layers_csv": (read_layers_csv, "path", "a layer table file"),
    "read_dryrun_yaml": (read_dryrun_yaml, "path", "a MindFormers pipeline_balance YAML"),
    "read_dryrun_csv": (read_dryrun_csv, "path", "a CSV of dry-run observations"),
}
ROWS = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1, backward_time=t, activation_mb=a)
        for o, t, a in (("none", 2, 50), ("full", 3, 5))]


def raises_exactly(message: str):
    """Expect an InputError with exactly ``message``."""
    return pytest.raises(InputError, match=f"^{re.escape(message)}$")


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("value, shown", [
    (None, "None"), (3, "3"), (2.5, "2.5"), (["model.json"], "['model.json']"), (b"model.json", "b'model.json'"),
    ("", "''"),
])
def test_a_path_argument_that_is_not_a_path(reader, value, shown):
    read, name, _ = READERS[reader]
    with raises_exactly(f"{name} must be a file path (a str or a pathlib.Path); got {shown}"):
        read(value)


def test_paths_with_a_nul_character_or_longer_than_the_system_opens(tmp_path):
    with raises_exactly("path is 'a\\x00b.json', which holds a NUL character; expected a file path"):
        read_layers_json("a\0b.json")
    with raises_exactly("folder must be a file path (a str or a pathlib.Path); got None"):
        read_dryrun_logs(None, stages=4, layers=8)
    with raises_exactly("path is a str of 5000 characters; expected a path shorter than the system's 4096 "
                        "characters"):
        read_dryrun_csv("x" * 5000)
    name = tmp_path / ("x" * 300 + ".csv")
    with raises_exactly(f"{str(name)[:80]}...{str(name)[-60:]}: cannot read (File name too long); expected a CSV of "
                        "dry-run observations"):
        read_dryrun_csv(name)


@pytest.mark.parametrize("reader", READERS)
def test_folders_binary_files_and_other_encodings(reader, tmp_path):
    read, _, what = READERS[reader]
    with raises_exactly(f"{tmp_path}: not a file; expected {what}"):
        read(tmp_path)
    binary = tmp_path / "binary"
    binary.write_bytes(b"kind,role\x00\x01\x02\n")
    with raises_exactly(f"{binary}: a binary file (it holds NUL bytes); expected {what}"):
        read(binary)
    for encoding in ("latin-1", "utf-16"):
        other = tmp_path / encoding
        other.write_text("kind,rôle\n", encoding=encoding)
        with raises_exactly(f"{other}: not UTF-8 text; expected {what}"):
            read(other)
    with raises_exactly(f"/dev/null: not a file; expected {what}"):
        read("/dev/null")


def test_a_file_above_the_size_limit(tmp_path):
    big = tmp_path / "big.csv"
    with big.open("wb") as file:
        file.truncate(17 * 2**20)
    with raises_exactly(f"{big}: 17.0 MB; sappkit reads files of at most 16 (sappkit.limits.MAX_FILE_MB) MB "
                        "(expected a layer table file)"):
        read_layers_csv(big)


def aliases(levels: int) -> str:
    """YAML under ``time_config`` (accepted, not read): ``l<i>`` holds nine of ``l<i-1>``, so 9**(i+1) values."""
    return "time_config:\n" + "".join(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else '1'] * 9)}]\n"
                                      for i in range(levels))



PEAKS = "memory_usage: {head_memory: *l8, tail_memory: 1, body_memories: {stage_id: [1], memories: [1]}}\n"
LAYER_JSON, DRY_RUN_YAML = "a MindFormers layer description object", "a MindFormers pipeline_balance YAML"


@pytest.mark.parametrize("name, text, message", [
    ("deep.json", "[" * 100_000 + "]" * 100_000, f"not valid JSON (nested too deeply to read); expected {LAYER_JSON}"),
    ("deep.yaml", "[" * 100_000 + "]" * 100_000,
     f"not valid YAML (nested too deeply to read); expected {DRY_RUN_YAML}"),
    ("digits.json", '{"stage_const_mem": ' + "9" * 5000 + "}",
     f"not valid JSON (a number with more than 4300 digits); expected {LAYER_JSON}"),
    ("broken.yaml", "pipeline_config: [1, 2\nmemory_usage: 3\n",
     f"not valid YAML (expected ',' or ']', but got ':' at line 2 column 13); expected {DRY_RUN_YAML}"),
    ("broken.csv", 'run,stage\n"r,0\n', "not a readable CSV (Error tokenizing data. C error: EOF inside string "
                                         "starting at row 1); expected dry-run observations"),
    ("offset.yaml", f"{aliases(9)}pipeline_config: {{pipeline_num: 4, num_layer: 8, offset: *l8}}\n{PEAKS}",
     "holds more than 1000000 (sappkit.limits.MAX_DOCUMENT_VALUES) values once its YAML aliases are expanded; "
     f"expected {DRY_RUN_YAML}"),
    ("recompute.yaml", f"{aliases(9)}pipeline_config: {{pipeline_num: 4, num_layer: 8}}\n"
                       f"recompute_config: {{recompute: *l8}}\n{PEAKS}",
     "holds more than 1000000 (sappkit.limits.MAX_DOCUMENT_VALUES) values once its YAML aliases are expanded; "
     f"expected {DRY_RUN_YAML}"),
    ("recursive.yaml", "pipeline_config: &a {pipeline_num: 4, num_layer: 8, offset: [*a]}\n",
     f"a YAML alias refers to a value that contains it; expected {DRY_RUN_YAML} without recursive aliases"),
    ("shared.yaml", f"{aliases(5)}pipeline_config: {{pipeline_num: 4, num_layer: 8}}\n"
                    f"{PEAKS.replace('*l8', '*l4')}",
     "memory_usage.head_memory is a list of 9 items; expected the stage's peak memory, a number > 0 (MB)"),
])
def test_documents_that_do_not_parse_nest_too_deeply_or_expand_too_far(tmp_path, name, text, message):
    """Deep nesting, alias bombs (refused before anything walks them), parse errors on several lines (one line
    here) and a huge value in a message (described, not printed)."""
    path = tmp_path / name
    path.write_text(text)
    read = {".json": read_layers_json, ".yaml": read_dryrun_yaml, ".csv": read_dryrun_csv}[path.suffix]
    with raises_exactly(f"{path}: {message}"):
        read(path)


@pytest.mark.parametrize("write", [write_layers_json, write_layers_csv])
def test_output_paths_that_cannot_be_written_leave_nothing_behind(write, tmp_path):
    with raises_exactly("path must be a file path (a str or a pathlib.Path); got None"):
        write(pd.DataFrame(ROWS), None)
    with raises_exactly(f"{tmp_path}: cannot write (Is a directory); expected a writable file path"):
        write(pd.DataFrame(ROWS), tmp_path)
    under_file = tmp_path / "file"
    under_file.write_text("kept")
    with raises_exactly(f"{under_file}/m.json: cannot write (Not a directory); expected a writable file path"):
        write(pd.DataFrame(ROWS), under_file / "m.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"] and under_file.read_text() == "kept"


def test_logs_that_are_not_text_are_read_around(tmp_path):
    stage = tmp_path / "stage0_rank0"
    stage.mkdir()
    (stage / "a.log").write_bytes(b"\xff\xfe\x00 noise\nUsed peak memory usage (without fragments): 1234M\n")
    (stage / "b.log").mkdir()
    frame = read_dryrun_logs(tmp_path, stages=4, layers=8)
    assert frame["memory_mb"].tolist() == [1234.0]
    with raises_exactly(f"{DATA / 'llama2_70b.json'}: not a folder; expected a folder with one stage<s>_* folder per "
                        "stage"):
        read_dryrun_logs(DATA / "llama2_70b.json", stages=4, layers=8)

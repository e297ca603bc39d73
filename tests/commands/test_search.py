"""``sappkit search``: the fastest strategies in 100 columns with units, for people, CSV or JSON; a config.json
model; a Dask scheduler that does not answer is refused in one line."""

import json
import sys

import pytest

from sappkit.cli import main

LLAMA = dict(model_type="llama", num_hidden_layers=8, hidden_size=1024, num_attention_heads=16,
             num_key_value_heads=4, intermediate_size=4096, vocab_size=32000, max_position_embeddings=2048,
             hidden_act="silu")


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    return path


def _search(config, *extra):
    return main(["search", "--model", str(config), "--devices", "16", "--global-batch", "64", "--device", "a100-80g",
                 "--memory", "2000", "--top", "5", "--balance-top", "2", *extra])


def test_cli_search_prints_the_fastest_strategies_with_units_and_the_limits(config, capsys):
    assert _search(config) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "config.json on 16 x a100-80g (dgx-a100), global batch 64 x 2,048 tokens, memory 2,000 MB"
    assert out[-1].startswith("searched in ") and out[-1].endswith(" s")
    assert out[1].split() == ["strategy", "step", "(ms)", "tokens/s/dev", "TFLOP/s/dev", "MFU", "peak", "(MB)"]
    assert len([line for line in out[2:] if line.startswith("t")]) == 5
    assert out[7].endswith("rejected") and out[8].startswith("best: t")
    assert sum(line.startswith("- ") for line in out) == 4
    assert all(len(line) <= 100 for line in out)


def test_cli_search_writes_json_and_csv(config, capsys):
    assert _search(config, "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["best"] == document["strategies"][0]["label"] and len(document["strategies"]) == 5
    assert sum(document["statuses"].values()) == document["searched"] and len(document["limits"]) == 4
    assert _search(config, "--format", "csv") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("tensor_parallel,pipeline_parallel,virtual_stages") and len(lines) == 6


@pytest.mark.parametrize("extra, message", [
    (["--scheduler", "tcp://127.0.0.1:9"], "sappkit search: --scheduler: no Dask scheduler answers at "
                                           "'tcp://127.0.0.1:9'"),
    (["--top", "0"], "sappkit search: --top must be an int >= 1; got 0"),
])
def test_cli_search_refuses_in_one_line(config, capsys, extra, message):
    if "--scheduler" in extra:
        pytest.importorskip("distributed")
    assert _search(config, *extra) == 2
    assert capsys.readouterr().err.startswith(message)


def test_cli_search_refuses_a_model_it_cannot_read(capsys):
    assert main(["search", "--model", "llama9", "--devices", "8", "--global-batch", "8"]) == 2
    assert capsys.readouterr().err == ("sappkit search: --model must be a preset (gpt3-175b, megatron-22b, "
                                       "megatron-530b, megatron-1t, llama2-70b, llama3-8b, llama3-70b, llama3-405b, "
                                       "mixtral-8x7b, deepseek-v3) or a config.json file; got 'llama9'\n")


def test_cli_search_names_the_extra_a_scheduler_needs(config, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as without the [cluster] extra
    assert _search(config, "--scheduler", "tcp://127.0.0.1:9") == 2
    assert capsys.readouterr().err == ("sappkit search: --scheduler needs Dask's distributed scheduler: pip install "
                                       "'sappkit[cluster]'\n")

"""``sappkit balance``: an output path that cannot be written is refused before the solve, and nothing is written."""

from sappkit.cli import main

from ..bundled import DATA

BALANCE = ["balance", str(DATA / "llama2_70b.json"), "--stages", "4", "--micro-batches", "8", "--memory", "70000"]


def test_cli_balance_refuses_a_yaml_path_it_cannot_write(tmp_path, capsys):
    for target, reason in [(tmp_path, "Is a directory"), (tmp_path / "none" / "plan.yaml", "No such file or directory"),
                           (DATA / "llama2_70b.json" / "plan.yaml", "Not a directory")]:
        assert main([*BALANCE, "--yaml", str(target)]) == 2
        assert capsys.readouterr() == ("", f"sappkit balance: {target}: cannot write ({reason}); expected a writable "
                                           "file path\n")
    assert list(tmp_path.iterdir()) == []


def test_cli_refuses_an_option_name_it_does_not_know_unless_declared(tmp_path, capsys, llama):
    from sappkit import write_layers_csv

    path = tmp_path / "typo.csv"
    frame = llama.frame.copy()
    frame["option"] = frame["option"].replace({"full": "fulll"})
    frame.attrs["custom_options"] = ("fulll",)
    write_layers_csv(frame, path)
    shape = [str(path), "--stages", "4", "--micro-batches", "8", "--memory", "70000"]
    assert main(["balance", *shape]) == 2
    assert capsys.readouterr() == ("", f"sappkit balance: {path}: layers row 5 (kind 'decoder') column 'option' is "
                                       "'fulll'; expected a recompute option, one of 'none', 'selective', 'comm', "
                                       "'both', 'full' (declare others with --custom-options NAME,...)\n")
    assert main(["balance", *shape, "--custom-options", "fulll"]) == 0
    assert capsys.readouterr().out.startswith("1f1b: 4 stages, 1 chunk(s), 8 micro-batches, 70,000 MB devices: optimal")


def test_cli_balance_says_what_is_optimal_and_how_far_the_step_objective_is(capsys):
    """SAPP's objective is a proxy: its optimum here simulates slower than what --objective step finds, and the
    first line says so with both step times (issue 39: 'optimal' while a faster plan exists)."""
    from sappkit import balance, read_layers_json

    shape = ["--stages", "16", "--micro-batches", "32", "--chunks", "3", "--schedule", "interleaved",
             "--less-memory", "--memory", "53000"]
    assert main(["balance", str(DATA / "llama2_70b.json"), *shape]) == 0
    first = " ".join(capsys.readouterr().out.split("simulated step time")[0].split())
    layers = read_layers_json(DATA / "llama2_70b.json")
    pipeline = dict(stages=16, micro_batches=32, chunks=3, schedule="interleaved", less_memory=True,
                    memory_mb=53000)
    proxy = balance(layers, **pipeline).simulate().step_time
    step = balance(layers, objective="step", **pipeline).simulate().step_time
    assert step < proxy
    assert first == (f"interleaved: 16 stages, 3 chunk(s), 32 micro-batches, 53,000 MB devices: optimal for SAPP's "
                     f"objective (a proxy), not for the step: simulated {proxy:,.0f} ms, {proxy / step - 1:.1%} "
                     f"slower than the {step:,.0f} ms --objective step finds")
    assert main(["balance", str(DATA / "llama2_70b.json"), *shape, "--objective", "step"]) == 0
    assert " ".join(capsys.readouterr().out.split("simulated step time")[0].split()) == (
        "interleaved: 16 stages, 3 chunk(s), 32 micro-batches, 53,000 MB devices: feasible for the step objective")

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

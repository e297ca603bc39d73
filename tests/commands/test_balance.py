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

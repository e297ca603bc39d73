"""``sappkit plan-dryruns``: sizes above the limits and output paths that cannot be written, in one line."""

from sappkit.cli import main


def test_cli_plan_dryruns_refuses_sizes_and_paths(tmp_path, capsys):
    assert main(["plan-dryruns", "--stages", str(2**70), "--layers", "96", "--options", "none,full"]) == 2
    assert capsys.readouterr().err == ("sappkit plan-dryruns: stages must be an int <= 256 (sappkit.limits.MAX_STAGES);"
                                       " got 1180591620717411303424\n")
    assert main(["plan-dryruns", "--stages", "8", "--layers", "64", "--options", "none,full", "--out",
                 str(tmp_path)]) == 2
    assert capsys.readouterr() == ("", f"sappkit plan-dryruns: {tmp_path}: cannot write (Is a directory); expected a "
                                       "writable file path\n")
    assert main(["plan-dryruns", "--stages", "8", "--layers", "64", "--options", ","]) == 2
    assert capsys.readouterr().err == "sappkit plan-dryruns: options must name at least one option, each once; got []\n"

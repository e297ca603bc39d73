"""The extra stays optional: ``import sappkit`` never imports torch, and ``sappkit.torch`` names the extra."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""}, check=False)


def test_import_sappkit_and_its_public_face_never_import_torch():
    result = _run("import sys, sappkit\n"
                  "for name in sappkit.__all__: getattr(sappkit, name)\n"
                  "print('torch' in sys.modules)")
    assert (result.returncode, result.stdout) == (0, "False\n"), result.stderr


def test_sappkit_torch_without_torch_names_the_extra():
    # A None entry in sys.modules makes ``import torch`` fail as if it were not installed.
    result = _run("import sys\n"
                  "sys.modules['torch'] = None\n"
                  "import sappkit.torch")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "ImportError: sappkit.torch needs PyTorch, which is not installed; install the extra: "
        "pip install 'sappkit[torch]'")

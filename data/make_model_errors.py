"""Write the bundled validation errors per family, ``data/model_errors.csv`` (``sappkit.strategy.bands``).

Run from the repository root: ``python data/make_model_errors.py``. Prices every published run
(``sappkit.validate``, the same as ``sappkit validate``) and writes its mean and worst absolute error per device,
family (dense, fsdp, moe) and precision, then over all runs: the error each search prediction carries.
"""

from pathlib import Path

from sappkit.strategy.validation import validate

OUT = Path(__file__).resolve().parent / "model_errors.csv"


def model_errors_now():
    """The table as the performance model prices the published runs today."""
    return validate().by_group()


if __name__ == "__main__":
    model_errors_now().to_csv(OUT, index=False, float_format="%.6f")
    print(f"wrote {OUT}")

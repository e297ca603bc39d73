"""Write the step bench's stored reference plans (``python data/make_step_references.py``; see data/README.md).

Runs :func:`sappkit.bench.step_reference.search_case` on every case of the step bench (the 40 held-out and
30 stress ones first, then the 17 bench cases): a seeded randomised search for its case's CPU seconds (30, 60
or 120), about 70 minutes in all, writing ``data/step_references.json`` after each case. Cases already in the file are kept,
so an interrupted run resumes; delete the file to search every case again.
"""

import json
import sys
import time
from pathlib import Path

from sappkit.bench.step_cases import BENCH_CASES, step_cases
from sappkit.bench.step_reference import CHECKPOINT_ROUNDS, SEARCH_SEED, search_case

PATH = Path(__file__).parent / "step_references.json"
ABOUT = (f"The step bench's reference plans (sappkit/bench/step_reference.py): per case a randomised local "
         f"search from several starts for its CPU seconds, seeded np.random.default_rng(({SEARCH_SEED}, index)); "
         f"'rounds' re-runs it exactly, 'checkpoint' is its best after {CHECKPOINT_ROUNDS} rounds; counts are "
         f"the placement [item, chunk, stage] flattened.")


def main() -> None:
    cases = {case["index"]: case for case in json.loads(PATH.read_text())["cases"]} if PATH.exists() else {}
    order = sorted(step_cases(), key=lambda case: case.index < BENCH_CASES)
    for case in order:
        if case.index in cases:
            continue
        start = time.process_time()
        cases[case.index] = search_case(case)
        print(f"case {case.index}: {cases[case.index]['rounds']} rounds, "
              f"{time.process_time() - start:.0f} s CPU", file=sys.stderr, flush=True)
        head = json.dumps(dict(about=ABOUT, command="python data/make_step_references.py"), indent=1)[:-2]
        rows = ",\n".join(json.dumps(cases[k]) for k in sorted(cases))
        PATH.write_text(f'{head},\n "cases": [\n{rows}\n]}}\n')


if __name__ == "__main__":
    main()

"""Write the step bench's stored reference plans (``python data/make_step_references.py``; see data/README.md).

Runs :func:`sappkit.bench.step_reference.search_case` on every case of the step bench (the 40 held-out and
30 stress ones first, then the 17 bench cases): a seeded randomised search for its case's CPU seconds (30, 60
or 120), about 70 minutes in all, writing ``data/step_references.json`` after each case. Cases already in the file are kept,
so an interrupted run resumes; delete the file to search every case again.

``python data/make_step_references.py --seconds 120 60 61`` searches the cases 60 and 61 again for 120 CPU
seconds each and stores the result with its seconds, where that is longer than the stored search ran. The
search is deterministic in its rounds, so a longer one passes through the shorter one's rounds and its plan
is never slower.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from sappkit.bench.step_cases import BENCH_CASES, step_cases
from sappkit.bench.step_reference import CHECKPOINT_ROUNDS, SEARCH_SEED, search_case, search_seconds

PATH = Path(__file__).parent / "step_references.json"
ABOUT = (f"The step bench's reference plans (sappkit/bench/step_reference.py): per case a randomised local "
         f"search from several starts for its CPU seconds, seeded np.random.default_rng(({SEARCH_SEED}, index)); "
         f"'rounds' re-runs it exactly, 'checkpoint' is its best after {CHECKPOINT_ROUNDS} rounds; counts are "
         f"the placement [item, chunk, stage] flattened.")


def write(cases: dict) -> None:
    head = json.dumps(dict(about=ABOUT, command="python data/make_step_references.py"), indent=1)[:-2]
    rows = ",\n".join(json.dumps(cases[k]) for k in sorted(cases))
    PATH.write_text(f'{head},\n "cases": [\n{rows}\n]}}\n')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, help="search the cases named again for this long")
    parser.add_argument("indices", type=int, nargs="*", help="the cases --seconds searches again")
    args = parser.parse_args()
    cases = {case["index"]: case for case in json.loads(PATH.read_text())["cases"]} if PATH.exists() else {}
    order = sorted(step_cases(), key=lambda case: case.index < BENCH_CASES)
    if args.seconds is not None:
        order = [case._replace(seconds=args.seconds) for case in order if case.index in args.indices
                 and (case.index not in cases or search_seconds(case, cases[case.index]) < args.seconds)]
    for case in order:
        if case.index in cases and args.seconds is None:
            continue
        start = time.process_time()
        cases[case.index] = search_case(case)
        print(f"case {case.index}: {cases[case.index]['rounds']} rounds, "
              f"{time.process_time() - start:.0f} s CPU", file=sys.stderr, flush=True)
        write(cases)


if __name__ == "__main__":
    main()

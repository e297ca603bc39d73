"""The layer table the trainer tests price configs on: one body kind under none, selective and full."""

import pandas as pd

OPTIONS = (("none", 2.0, 40.0), ("selective", 2.2, 25.0), ("full", 3.0, 4.0))


def table(count: int, *, head=(0.5, 1.0)) -> pd.DataFrame:
    """``count`` body layers between an embedding (forward, backward ``head``) and an LM head."""
    rows = [dict(kind="block", role="body", count=count, param_mb=100, option=o, forward_time=1.0,
                 backward_time=b, activation_mb=a) for o, b, a in OPTIONS]
    rows += [dict(kind="embed", role="head", count=1, param_mb=50, option="none", forward_time=head[0],
                  backward_time=head[1], activation_mb=10),
             dict(kind="lm_head", role="tail", count=1, param_mb=80, option="none", forward_time=0.8,
                  backward_time=1.5, activation_mb=20)]
    return pd.DataFrame(rows)

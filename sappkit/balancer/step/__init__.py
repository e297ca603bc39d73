"""The ``step`` objective: a placement's exact simulated step time (:mod:`.steptime`); with one chunk the
proven-fastest placement over the stages' contents (:mod:`.contents`, :mod:`.proof`); with more a local
search on it with stage exchanges and re-splits (:mod:`.local_search`, :mod:`.exchange`, :mod:`.resplit`)
from several starts (:mod:`.starts`, :mod:`.least_work`), and a proven lower bound that gives its gap
(:mod:`.bound`).
"""

from .bound import step_lower_bound
from .local_search import improve
from .proof import prove
from .starts import start_placements
from .steptime import step_timer

__all__ = ["improve", "prove", "start_placements", "step_lower_bound", "step_timer"]

"""Python's cyclic garbage collector, set for a serving process.

By default a young collection runs every 700 net new container objects, and older ones
walk every object the process holds. A gateway under load holds thousands of young
objects at any moment (each request in flight its parsed body, tasks, futures, response),
so at 700 it ran thousands of young collections a minute, each walking the requests in
flight, which then aged into the older generations and made those walks longer; and each
full collection walked the 136,000-odd objects startup made (about 90 ms, with every
request stopped). Measured at 64 clients sending single sentences (``docs/performance.md``):
0.2 of the gateway's 0.6 ms of CPU per request.

``settle`` is called once a serving process has imported and built its app: what exists
then (modules, classes, the app) is frozen, never walked again, and young collections wait
for ``YOUNG_THRESHOLD`` new objects. Garbage in reference cycles is still collected, a
little later.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def settle() -> None:
    gc.collect()
    gc.freeze()
    young, older, oldest = gc.get_threshold()
    gc.set_threshold(max(YOUNG_THRESHOLD, young), older, oldest)

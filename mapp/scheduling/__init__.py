"""Pipeline scheduling that makes training faster (issues 17 and 18; nothing here yet).

MegaDPP: dynamic pipeline schedules (which micro-batch and chunk each stage runs next, chosen
from what is ready rather than a fixed 1F1B order). MegaFBD: forward and backward decoupled
onto separate ranks. A schedule simulator to compare them before a run. Runtime side: it uses
``mapp.transport`` for asynchronous sends and never imports the offline analysis.
"""

"""The merged Chrome/Perfetto trace of a whole job: the one place that writes it.

``write_chrome_trace(bundle, path, clock=..., extra_lines=...)`` streams every rank's events
onto one timeline (pid = rank, one thread per lane); ``chrome_extras(bundle, matching, clock)``
adds flow arrows for p2p messages and collectives and marks each collective's last arriver.
Downstream of matching and alignment, which it draws; nothing upstream imports it.
"""

from mapp.analysis.chrome.flows import chrome_extras
from mapp.analysis.chrome.writer import MergeResult, lane_ids, process_order, us_text, write_chrome_trace

__all__ = ["MergeResult", "chrome_extras", "lane_ids", "process_order", "us_text", "write_chrome_trace"]

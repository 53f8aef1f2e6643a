"""Moved to ``campaign.daily.restore``. Kept for one release: a watchdog armed by 0.2.0 imports
``campaign.window.restore`` when it fires, and a tool upgraded under an armed window must still let it bring
the daily back. Its ``stop_window_lanes`` now returns (stopped, not stopped); 0.2.0's watchdog calls only
``restore``."""

from campaign.daily.restore import restore

__all__ = ["restore"]

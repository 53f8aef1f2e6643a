"""The failsafe: what brings the daily back when the runner cannot, armed before the daily is stopped.

Owns the systemd timer and the watchdog pair on the runner's machine (``failsafe``, ``watchdog``,
``watchdogfiles``; both run ``restore_now``) and the watchdog container kept on the daily's own box
(``enginefailsafe``, running ``boxwatchdog``), and which supervisor outside the runner's process tree keeps
a window's deadline, with the periodic check's crontab line (``supervisor``).

Imports errors, fsutil, contracts, lanes and the daily (its state and ``restore``); never promotion or the
window. ``boxwatchdog`` runs inside a container on the box: it imports nothing of campaign.
"""

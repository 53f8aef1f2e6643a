"""``python -m campaign.failsafe.restore_now WINDOW [GENERATION]``: what the systemd timer runs at the deadline.

It restores as a watchdog does (``watchdog.restore_until_served``): retried with backoff, every error in the
window's failsafe log and journal, a final failure recorded for `campaign status`, and a non-zero exit
status that systemd keeps with the unit.
"""

from __future__ import annotations

import sys

from campaign.daily.state import WindowState
from campaign.failsafe.watchdog import EXIT_STATE_UNREADABLE, Report, describe, restore_until_served


def main(argv: list[str]) -> int:
    window = argv[0]
    # a unit armed before the generation was passed has none: it then acts for whichever generation is armed
    generation = int(argv[1]) if len(argv) > 1 else None
    report = Report(window, "systemd timer")
    try:
        state = WindowState.load(window)
    except Exception as exc:  # top level of the timer's process: the snapshot is in the state, without it
        # there is nothing to restore from; reported in the failsafe log and journal, exit non-zero
        report.error("failsafe.state", f"cannot read the window state, so the daily cannot be restored: "
                                       f"{describe(exc)}", final=True)
        return EXIT_STATE_UNREADABLE
    report.know(state)
    if not state.armed or (generation is not None and state.failsafe_generation != generation):
        report.log("the window is disarmed or was re-armed; nothing to do")
        return 0
    return restore_until_served(window, reason="deadline reached", report=report,
                                generation=state.failsafe_generation if generation is None else generation)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

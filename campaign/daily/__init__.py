"""The daily lane: the server users rely on every day, and every record of having touched it.

Owns the incumbent's snapshot, stop, start and proof (a process, a systemd unit, a container:
``incumbent``, ``dailycontainer``), ``campaign daily`` (``daily``), the window's state file (``state``) and the
daily's credentials in it (``secretstate``: removed once the window is over), the signed ledger of
promotions (``ledger``; its rollback records hold references, ``launchrefs``) and ``restore`` (the daily back
up, with proof).

Imports errors, fsutil, signing, contracts and lanes; never the failsafe, promotion or the window, which
all stand on this room.
"""

"""Promotion: a candidate made the daily, or rolled back, from verified receipts only.

Owns ``campaign promote`` and ``rollback`` (``promote``: the bundle verified, its required gates PASS,
``promote-begun`` in the ledger before anything is touched), the candidate's launch rebuilt from the bundle
and the smoke after (``candidate``), the serving identity the promoted daily keeps from the daily and the
lane plumbing mapped back (``identity``), and the container daily's swap (``promotecontainer``).

Imports errors, fsutil, signing, contracts, lanes, receipts, gates (the replays a smoke reads), the daily
(incumbent, ledger) and faults; never the failsafe or the window.
"""

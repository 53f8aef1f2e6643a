"""The window: the daily taken down behind the failsafe, each visit booted and its gates run, the daily
restored with proof, the bundle judged and signed; and what reads a window later (resume, rejudge, status,
doctor, the orphan sweep) or runs several (one per box, detached).

``run`` is a window's sequence; its steps are beside it (``begin`` and ``preflight`` before anything is
touched, ``takedown`` for the daily through the daily's room (``campaign.daily``) and the failsafe's
(``campaign.failsafe``), ``screening``, ``lanevisit`` and ``identity`` for each boot, ``schedule``,
``bundlecopy``; ``context`` is what they share); ``judge`` and ``rejudge`` judge a bundle from its records
alone.

Imports everything below it (errors, terminal, fsutil, signing, contracts, lanes, receipts, gates, daily,
failsafe, faults); never promotion, which reads only the signed bundles a window leaves.
"""

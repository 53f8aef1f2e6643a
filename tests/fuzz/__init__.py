"""Property-based fuzzing of what reads hostile input (issue #30, item 18): the contract loader, the bundle
verifier, the archive reader and the CLI's error printing. Each example runs in a forked child under a time
and memory bound (``harness.py``); profiles and their budgets are in ``conftest.py``."""

"""`python -m campaign.cli`: what the console script, the detached runner and the periodic check run."""

from campaign.cli import main

main()

#!/usr/bin/env bash
# Node setup: runs from the worktree root before every iteration.
#
# It has no time limit, and its output goes to setup.log in the node directory.
# A non-zero exit fails the iteration (three failures in a row end the run), so keep
# it idempotent and quick when there is nothing to do.
set -euo pipefail

# Examples:
# python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]'
# npm ci --silent
# make build

exit 0

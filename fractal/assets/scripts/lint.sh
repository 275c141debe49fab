#!/usr/bin/env bash
# Node lint: run by `fractal commit` from the worktree root before it commits.
#
# A non-zero exit refuses the commit and its output is shown to the caller;
# `fractal commit --force` skips it.
set -euo pipefail

# Examples:
# ruff check .
# npx eslint src
# go vet ./...

exit 0

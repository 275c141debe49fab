#!/bin/sh
# Writes invalid UTF-8 to stdout and stderr, then exits 3.
printf 'out \377\376 line\n'
printf 'err \300 line\n' >&2
exit 3

#!/bin/sh
# Ignores SIGTERM (the ignore is inherited by its child), so only SIGKILL stops it.
trap '' TERM
sleep 300 &
echo ready
wait

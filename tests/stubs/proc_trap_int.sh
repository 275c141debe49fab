#!/bin/sh
# Prints which signal arrived and exits; a background sleep stays in the group.
trap 'echo got INT; exit 7' INT
trap 'echo got TERM; exit 8' TERM
sleep 300 &
echo ready
wait

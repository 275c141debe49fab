#!/bin/sh
# Starts a grandchild in its own session (it leaves our process group) and prints its pid.
# With "exit" as $1 the leader exits at once, leaving the grandchild behind.
setsid sleep 300 </dev/null >/dev/null 2>&1 &
echo "$!"
[ "$1" = exit ] && exit 0
wait

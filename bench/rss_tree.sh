#!/usr/bin/env bash
# Peak RSS of a command with all its descendants, summed (forked scan workers share the parent's
# pages copy-on-write, so the sum overstates what they take; wait4's peak, which speed_bench.py
# prints, is the largest single process). Samples every 20 ms.
#   bench/rss_tree.sh diagnose scan big.log --format json
"$@" > /dev/null &
top=$!
peak=0
while kill -0 "$top" 2>/dev/null; do
    pids=$(ps -o pid= --ppid "$top" 2>/dev/null | tr -s ' \n' ',,' | sed 's/^,//; s/,$//')
    sum=$(ps -o rss= -p "$top${pids:+,$pids}" 2>/dev/null | awk '{s += $1} END {print s + 0}')
    [ "$sum" -gt "$peak" ] && peak=$sum
    sleep 0.02
done
wait "$top"
echo "peak RSS of the process tree, summed: $((peak / 1024)) MB"

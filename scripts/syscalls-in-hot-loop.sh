#!/usr/bin/env bash
# Shows that in thread mode the application's own thread makes no system call in isend, irecv
# and test: runs examples/hot_loop.rs on 2 ranks under strace -f and counts the system calls
# rank 0's main thread made between its two getrusage markers. Needs strace (apt-get install strace).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p nicmsg --example hot_loop -p nicmsg-cli --bin nicmsg
trace=$(mktemp)
trap 'rm -f "$trace"' EXIT
NICMSG_ENGINE=${NICMSG_ENGINE:-thread} strace -f -qq -o "$trace" \
  target/release/nicmsg run -n 2 -- target/release/examples/hot_loop
# The thread that issued the markers is the application thread; count its calls between them.
awk '
  /getrusage\(/ { marks[$1]++; next }
  $2 == "<..." && $3 == "getrusage" { next }
  { if (marks[$1] == 1) { split($2, call, "("); calls[$1] += 1; names[$1 " " call[1]]++ } }
  END {
    for (t in marks) if (marks[t] == 2) {
      printf "application thread %s: %d system calls between the markers (10000 iterations of isend+irecv+test)\n", t, calls[t] + 0
      for (k in names) { split(k, parts, " "); if (parts[1] == t) printf "  %s: %d\n", parts[2], names[k] }
    }
  }' "$trace"

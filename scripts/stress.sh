#!/usr/bin/env bash
# The MPI-semantics stress test (examples/c/stress.c) at full scale, over the whole matrix:
# 4 and 8 ranks, both engine modes, UDP over loopback, and UDP and AF_XDP over network
# namespaces with 0% and 5% packet loss. One line per configuration with its result and time;
# a failed configuration's output is kept in a log and the command that reruns it is printed.
#
#   scripts/stress.sh                          # the matrix, a new random seed
#   scripts/stress.sh --seed 7 --no-netns      # loopback only (no root needed)
#   scripts/stress.sh -- --skip compute        # options after -- go to the stress program
#
# The namespace configurations need root, ip (iproute2) and nft (nftables); without them they
# are skipped, saying why. The small scale runs in `cargo test` (crates/nicmsg/tests/stress.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

seed=$(( $(od -An -N4 -tu4 /dev/urandom) ))
netns=1
program_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="$2"; shift 2 ;;
    --no-netns) netns=0; shift ;;
    --) shift; program_args=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "stress.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

cargo build -q --release -p nicmsg -p nicmsg-cli --lib --bins --examples  # --lib: libnicmsg.so
target=target/release
cc -std=c11 -O2 -Wall -Wextra -Werror examples/c/stress.c -Iinclude -L"$target" \
  -Wl,-rpath,"$PWD/$target" -lnicmsg -o "$target/c-stress"

why_no_netns=""
if [ "$netns" = 0 ]; then
  why_no_netns="--no-netns"
elif [ "$(id -u)" != 0 ]; then
  why_no_netns="not root"
elif ! command -v ip >/dev/null || ! command -v nft >/dev/null; then
  why_no_netns="ip or nft missing (apt-get install iproute2 nftables)"
fi

logs=$(mktemp -d -t nicmsg-stress.XXXXXX)
failed=0
passed=0
echo "stress at full scale, seed $seed, logs in $logs"

# run RANKS ENGINE WHERE TRANSPORT LOSS
run() {
  local ranks=$1 engine=$2 where=$3 transport=$4 loss=$5
  local name="${ranks} ranks ${engine} ${where} ${transport} loss ${loss}"
  local launch=(run -n "$ranks" --engine "$engine" --timeout 3600)
  if [ "$where" = netns ]; then
    if [ -n "$why_no_netns" ]; then
      printf '%-42s skipped (%s)\n' "$name" "$why_no_netns"
      return
    fi
    launch+=(--netns --loss "$loss")
  fi
  local log="$logs/${ranks}-${engine}-${where}-${transport}-${loss%\%}.log"
  local start end status=0
  start=$(date +%s.%N)
  # --keep-going: the log lists every kind of failed check, not just the first.
  NICMSG_TRANSPORT=$transport "$target/nicmsg" "${launch[@]}" -- "$target/c-stress" \
    --seed "$seed" --keep-going "${program_args[@]}" >"$log" 2>&1 || status=$?
  end=$(date +%s.%N)
  local seconds
  seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  if [ "$status" = 0 ] && grep -q "stress: passed" "$log"; then
    passed=$((passed + 1))
    # From the program's summary: messages, bytes, cancelled sends.
    printf '%-42s passed  %7s s  %s\n' "$name" "$seconds" "$(grep -o 'stress: passed: .*' "$log" |
      sed -E 's/.* ([0-9]+ messages), ([0-9]+ bytes) verified.*(sends cancelled [0-9]+ \(delivered anyway [0-9]+\)).*/\1, \2, \3/')"
  else
    failed=$((failed + 1))
    printf '%-42s FAILED  %7s s  (exit %s) %s\n' "$name" "$seconds" "$status" \
      "$(grep -m1 -o 'stress: FAIL.*' "$log" || tail -n1 "$log")"
    echo "    log: $log"
    echo "    rerun: NICMSG_TRANSPORT=$transport $target/nicmsg ${launch[*]} -- $target/c-stress --seed $seed --keep-going ${program_args[*]}"
  fi
}

for ranks in 4 8; do
  for engine in inline thread; do
    run "$ranks" "$engine" loopback udp 0%
    for transport in udp xdp; do
      for loss in 0% 5%; do
        run "$ranks" "$engine" netns "$transport" "$loss"
      done
    done
  done
done

echo "stress: $passed configurations passed, $failed failed (seed $seed)"
[ "$failed" = 0 ]

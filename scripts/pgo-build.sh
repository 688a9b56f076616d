#!/usr/bin/env bash
# Builds nicmsg's release binaries with profile-guided optimization (PGO), for deployment and
# for measurements: an instrumented build runs short training workloads (ping-pongs and streams
# through the library, the rank API and, where libfabric's fi_pingpong is installed, the
# libfabric provider), and the final build lays out and inlines the code by what they ran.
#
#   scripts/pgo-build.sh              # binaries in target/pgo/release (nicmsg, nicmsg-bench,
#                                     # libnicmsg_fi.so, libnicmsg.so, the examples)
#   scripts/pgo-build.sh --plain      # the same build options without the profile, into
#                                     # target/pgo-plain/release (to measure what PGO brings)
#
# Why: a small message's path crosses the library, the engine, the protocol and the UDP
# transport, about 11,000 instructions a round trip an end in a plain release build, and its
# code is larger than a core's 32 KiB instruction cache. PGO keeps the hot path together and
# inlines across those layers: the in-process ping-pong (examples/round_trip_cost.rs) runs
# 35 % fewer instructions with 55 % fewer instruction-cache misses (docs/benchmarks.md, "Builds").
#
# Needs llvm-profdata of the Rust toolchain's LLVM (`rustup component add llvm-tools`);
# without it the script says so and stops. Training runs on loopback only, takes about a
# minute, and needs no root.
set -euo pipefail
cd "$(dirname "$0")/.."

plain=0
case "${1:-}" in
  --plain) plain=1 ;;
  "") ;;
  -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "pgo-build.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
esac

# Whole-program optimization for both builds, so that --plain differs only by the profile.
export CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
build() {
  cargo build -q --release -p nicmsg-cli -p nicmsg-bench -p nicmsg-fabric --bins --lib
  cargo build -q --release -p nicmsg --lib --examples
}

if [ "$plain" = 1 ]; then
  CARGO_TARGET_DIR=target/pgo-plain build
  echo "pgo-build.sh: the same build without a profile is in target/pgo-plain/release"
  exit 0
fi

profdata="$(find "$(rustc --print sysroot)" -name llvm-profdata -type f 2>/dev/null | head -n 1)"
if [ -z "$profdata" ]; then
  echo "pgo-build.sh: llvm-profdata not found in the Rust toolchain;" \
       "install it with \`rustup component add llvm-tools\`" >&2
  exit 1
fi

data="$PWD/target/pgo-data"
rm -rf "$data"
mkdir -p "$data"
echo "pgo-build.sh: instrumented build (target/pgo-gen)"
CARGO_TARGET_DIR=target/pgo-gen RUSTFLAGS="-Cprofile-generate=$data" build
gen=target/pgo-gen/release

echo "pgo-build.sh: training"
# The library's own path, in one process: every size class (short, medium and long eager
# messages, rendezvous).
for size_rounds in 8:20000 256:10000 4096:5000 65536:1000 1048576:100; do
  "$gen/examples/round_trip_cost" "${size_rounds%:*}" "${size_rounds#*:}" >/dev/null
done
# The rank API under the launcher, both engine modes: a ping-pong and a stream.
for engine in inline thread; do
  for pattern in latency bw; do
    "$gen/nicmsg" run -n 2 --engine "$engine" -- "$gen/nicmsg-bench" bench-worker \
      --pattern "$pattern" --system nicmsg --name "nicmsg-$engine" --label training \
      --sizes 8,4096,65536,1048576 --reps 2000 --mtu 1500 \
      --progress /dev/null --result "$data/bench-$engine-$pattern.json" >/dev/null
  done
done
# The libfabric provider, as fi_pingpong (and Open MPI's ofi MTL) call it.
if command -v fi_pingpong >/dev/null 2>&1; then
  provider_dir="$data/provider"
  mkdir -p "$provider_dir"
  cp "$gen/libnicmsg_fi.so" "$provider_dir/libnicmsg-fi.so"
  for size in 8 4096 65536; do
    port=$((20000 + RANDOM % 20000))
    FI_PROVIDER_PATH="$provider_dir" NICMSG_ENGINE=inline fi_pingpong -p nicmsg -e rdm \
      -m tagged -S "$size" -I 2000 -B "$port" >/dev/null 2>&1 &
    server=$!
    sleep 0.5
    FI_PROVIDER_PATH="$provider_dir" NICMSG_ENGINE=inline fi_pingpong -p nicmsg -e rdm \
      -m tagged -S "$size" -I 2000 -P "$port" 127.0.0.1 >/dev/null 2>&1 || true
    wait "$server" || true
  done
else
  echo "pgo-build.sh: fi_pingpong not installed (libfabric-bin): the provider's own code" \
       "is trained only through the library"
fi

"$profdata" merge -o "$data/merged.profdata" "$data"/*.profraw
echo "pgo-build.sh: optimized build (target/pgo)"
CARGO_TARGET_DIR=target/pgo RUSTFLAGS="-Cprofile-use=$data/merged.profdata" build
echo "pgo-build.sh: done; binaries in target/pgo/release"

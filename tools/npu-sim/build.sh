#!/bin/sh
# Build npu-sim releases 1.0 and 1.1 side by side:
#   OUTDIR/1.0/bin/npuc, OUTDIR/1.0/lib/{libnpu.rlib,npuc.conf}, OUTDIR/1.0/device/
#   OUTDIR/1.1/...   (same layout)
#   OUTDIR/tools/npu-sim-profile  (random chips for benchmarks; PROFILE.md)
# Usage: tools/npu-sim/build.sh OUTDIR [CARGO_TARGET_DIR]
set -eu
OUT=${1:?usage: build.sh OUTDIR [CARGO_TARGET_DIR]}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TGT=${2:-$OUT/cargo-target}
CARGO=${CARGO:-cargo}
command -v "$CARGO" >/dev/null 2>&1 || CARGO=$HOME/.cargo/bin/cargo
[ -x "$CARGO" ] || command -v "$CARGO" >/dev/null 2>&1 || CARGO=/root/.cargo/bin/cargo
RUSTC_BIN=${RUSTC:-$(dirname "$CARGO")/rustc}
[ -x "$RUSTC_BIN" ] || RUSTC_BIN=rustc
# cargo compiles with the rustc that kernels are compiled with later (npuc.conf): the rlib and
# the kernels must come from one rustc, also when another one is first on PATH.
RUSTC=$RUSTC_BIN
export RUSTC
REAL_RUSTC="$("$RUSTC_BIN" --print sysroot)/bin/rustc"
for rel in 1.0 1.1; do
  feat=""
  [ "$rel" = "1.1" ] && feat="--features npuc/v1_1"
  # shellcheck disable=SC2086
  "$CARGO" build --release -j 2 --offline --manifest-path "$HERE/Cargo.toml" --target-dir "$TGT/$rel" -p npu -p npuc $feat
  d="$OUT/$rel"
  mkdir -p "$d/bin" "$d/lib" "$d/device"
  cp -f "$TGT/$rel/release/npuc" "$d/bin/npuc.tmp" && mv -f "$d/bin/npuc.tmp" "$d/bin/npuc"
  cp -f "$TGT/$rel/release/libnpu.rlib" "$d/lib/libnpu.rlib"
  echo "rustc=$REAL_RUSTC" > "$d/lib/npuc.conf"
  if [ "$rel" = "1.0" ]; then
    mkdir -p "$OUT/tools"
    cp -f "$TGT/$rel/release/npu-sim-profile" "$OUT/tools/npu-sim-profile.tmp" && mv -f "$OUT/tools/npu-sim-profile.tmp" "$OUT/tools/npu-sim-profile"
  fi
  i=0
  while [ $i -lt 8 ]; do : > "$d/device/slot$i.lock" 2>/dev/null || true; i=$((i+1)); done
done
echo "npu-sim built: $OUT/1.0/bin/npuc, $OUT/1.1/bin/npuc"

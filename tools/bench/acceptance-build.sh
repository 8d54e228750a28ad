#!/bin/sh
# Build tools/bench/acceptance against an existing npuopt build dir without touching the project's
# CMakeLists (the lead includes tools/bench/acceptance.cmake instead). Usage:
#   tools/bench/acceptance-build.sh BUILD_DIR     → BUILD_DIR/tools/bench/acceptance
set -eu
B=$(cd "${1:?usage: acceptance-build.sh BUILD_DIR}" && pwd)
S=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$B/tools/bench"
L=/usr/lib/x86_64-linux-gnu
c++ -std=c++20 -O2 -g -DNDEBUG -DFMT_SHARED -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB \
  -DNPUOPT_BUILD_DIR="\"$B\"" -DNPUOPT_SOURCE_DIR="\"$S\"" -DNPUOPT_VERSION="\"0.1.0\"" \
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion \
  -I"$S/src" -isystem /usr/include/eigen3 "$S/tools/bench/acceptance.cpp" \
  "$B/libnpuopt_eval.a" "$B/libnpuopt_knowledge.a" "$B/libnpuopt_store.a" "$B/libnpuopt_target.a" \
  "$B/libnpuopt_proc.a" "$B/libnpuopt_config.a" "$B/libnpuopt_core.a" \
  -lsqlite3 -lspdlog -lfmt -lyaml-cpp -lcmark-gfm -lcmark-gfm-extensions -lpthread \
  -o "$B/tools/bench/acceptance"
echo "built $B/tools/bench/acceptance"

#!/usr/bin/env bash
# The build's layer views refuse an upward include: a probe in eval/'s view that includes a
# campaign/ header must fail to compile with "No such file", while the same probe including a
# knowledge/ header (below eval) compiles. Usage: check_layer_views.sh CXX BUILD_DIR
set -euo pipefail
cxx="$1"
views="$2/layer-include"
probe_dir="$(mktemp -d)"
trap 'rm -rf "$probe_dir"' EXIT

printf '#include "knowledge/rules.hpp"\nint main() { return 0; }\n' >"$probe_dir/down.cpp"
printf '#include "campaign/driver.hpp"\nint main() { return 0; }\n' >"$probe_dir/up.cpp"

if ! "$cxx" -std=c++20 -fsyntax-only -I"$views/eval" "$probe_dir/down.cpp" 2>"$probe_dir/down.err"; then
  echo "FAIL: eval's view cannot include knowledge/ (below it):"; cat "$probe_dir/down.err"; exit 1
fi
if "$cxx" -std=c++20 -fsyntax-only -I"$views/eval" "$probe_dir/up.cpp" 2>"$probe_dir/up.err"; then
  echo "FAIL: eval's view compiled an include of campaign/ (above it)"; exit 1
fi
if ! grep -q "campaign/driver.hpp: No such file" "$probe_dir/up.err"; then
  echo "FAIL: the upward include failed for another reason:"; cat "$probe_dir/up.err"; exit 1
fi
echo "ok: eval/ may include knowledge/; an include of campaign/ from eval/ fails to build"

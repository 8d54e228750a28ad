#!/usr/bin/env bash
# Ship npuopt to a machine with the GPU, run a campaign there, bring the campaign back.
#
#   tools/cuda-h200/bundle.sh pack DIR [--npuopt BIN]
#       DIR/ gets a self-contained npuopt: bin/npuopt, lib/ (every shared library `ldd` names, the
#       loader included, so it runs on another distribution), the wrapper DIR/npuopt, the cuda-h200
#       target data (knowledge/, microbench/, dsl_templates/) and cudac's sources (built THERE by
#       run.sh with that machine's nvcc, against its CUDA driver). BIN defaults to build/npuopt.
#       Then: tar -C DIR/.. -czf bundle.tgz DIR's name; copy it over (scp, or a carried folder).
#
#   DIR/run.sh CAMPAIGN [--shape S] [--minutes M] [--out TGZ] [--kernels k1,k2]
#       On the GPU machine: builds cudac, `npuopt init` (target cuda-h200; sandbox not required:
#       bubblewrap's minimal /dev has no /dev/nvidia*), `npuopt kb build` (the microbenchmarks and
#       the fitted hardware model), `npuopt run` for M minutes, `npuopt report`, then packs the
#       campaign directory into TGZ (default CAMPAIGN.tgz). Bring TGZ back and unpack it: `npuopt
#       status`, `report`, `tree show` work on it here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[ "${1:-}" = pack ] && [ $# -ge 2 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
dir=$2; shift 2
bin=$root/build/npuopt
while [ $# -gt 0 ]; do
  case $1 in
    --npuopt) bin=$2; shift 2 ;;
    *) echo "bundle.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "bundle.sh: no npuopt binary at $bin (build it, or pass --npuopt)" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib" "$dir/knowledge" "$dir/microbench" "$dir/dsl_templates" "$dir/src/tools"
strip -o "$dir/bin/npuopt" "$bin" 2>/dev/null || cp "$bin" "$dir/bin/npuopt"
# every library the binary loads, and the loader itself (glibc must match its loader)
ldd "$bin" | awk '/=> \//{print $3} $1 ~ /ld-linux/{print $1}' | while read -r lib; do
  cp -L "$lib" "$dir/lib/"
done
loader=$(basename "$(ldd "$bin" | awk '/ld-linux/{print $1}' | tail -n1)")
cat > "$dir/npuopt" <<WRAP
#!/bin/sh
# npuopt with its own libraries (bundle.sh): the loader is called directly, so nothing of the
# library path leaks into the toolchain npuopt starts.
here=\$(cd "\$(dirname "\$0")" && pwd)
export NPUOPT_KNOWLEDGE_DIR=\${NPUOPT_KNOWLEDGE_DIR:-\$here/knowledge}
export NPUOPT_BUILD_DIR=\${NPUOPT_BUILD_DIR:-\$here/build}
exec "\$here/lib/$loader" --library-path "\$here/lib" "\$here/bin/npuopt" "\$@"
WRAP
chmod +x "$dir/npuopt"
cp -r "$root/knowledge/cuda-h200" "$dir/knowledge/"
cp -r "$root/microbench/cuda-h200" "$dir/microbench/"
cp -r "$root/dsl_templates/cuda-h200" "$dir/dsl_templates/"
cp -r "$root/tools/cuda-h200" "$dir/src/tools/"
cp "$here/run.sh" "$dir/run.sh"
chmod +x "$dir/run.sh"
du -sh "$dir" | awk '{print "bundle.sh: " $2 " (" $1 ")"}'

#!/usr/bin/env bash
# Instantiate a design template: substitute every ${PARAM} of the template's
# source with the given value, or with the param's default from the yaml, and
# append the template's shared prelude (`prelude:`) when it names one.
#
#   dsl_templates/npu-sim/instantiate.sh TEMPLATE.template.yaml [-o OUT.rs] [NAME=VALUE ...]
#
# Prints the path of the instantiated source (a temp file, with the template source's extension,
# unless -o is given). Used for every target's templates (dsl_templates/cuda-h200/instantiate.sh calls it).
# Fails (exit 2) on an unknown param name, a missing default, or a ${NAME}
# left in the output. Domains and constraints are NOT checked here (npuopt
# does that); this is a tool for humans and tests.
set -euo pipefail
usage() { echo "usage: $0 TEMPLATE.template.yaml [-o OUT.rs] [NAME=VALUE ...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
yaml=$1; shift
[ -f "$yaml" ] || { echo "instantiate: no such template: $yaml" >&2; exit 2; }
out=""
if [ "${1:-}" = "-o" ]; then [ $# -ge 2 ] || usage; out=$2; shift 2; fi
dir=$(dirname "$yaml")
src=$(sed -n 's/^source:[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$yaml" | head -n1)
[ -n "$src" ] && [ -f "$dir/$src" ] || { echo "instantiate: $yaml: source '$src' not found" >&2; exit 2; }

# params: lines "  NAME: {values: [...], default: V}" inside the params: block
declare -A val
names=()
while IFS= read -r line; do
  name=$(printf '%s\n' "$line" | sed -n 's/^[[:space:]]\{1,\}\([A-Z_][A-Z0-9_]*\):[[:space:]]*{.*/\1/p')
  [ -n "$name" ] || continue
  def=$(printf '%s\n' "$line" | sed -n 's/.*default:[[:space:]]*\([^,}[:space:]]*\).*/\1/p')
  [ -n "$def" ] || { echo "instantiate: $yaml: param $name has no default" >&2; exit 2; }
  names+=("$name"); val[$name]=$def
done < <(sed -n '/^params:/,/^[a-z_]*:/p' "$yaml")

for kv in "$@"; do
  case $kv in *=*) ;; *) usage ;; esac
  k=${kv%%=*}; v=${kv#*=}
  [ -n "${val[$k]+x}" ] || { echo "instantiate: $yaml has no param '$k' (params: ${names[*]})" >&2; exit 2; }
  val[$k]=$v
done

if [ -z "$out" ]; then
  tag=$(basename "$yaml" .template.yaml)
  out=$(mktemp "${TMPDIR:-/tmp}/${tag}.XXXXXX")
  ext=${src##*.}  # the template source's own extension (.rs, .cu, ...)
  mv "$out" "$out.$ext"; out="$out.$ext"
fi
expr=()
for n in "${names[@]}"; do expr+=(-e "s/\\\${$n}/${val[$n]}/g"); done
sed "${expr[@]}" "$dir/$src" > "$out"
# the shared prelude (template.yaml `prelude:`), after the template's own code, as npuopt does
prelude=$(sed -n 's/^prelude:[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$yaml" | head -n1)
if [ -n "$prelude" ]; then
  [ -f "$dir/$prelude" ] || { echo "instantiate: $yaml: prelude '$prelude' not found" >&2; exit 2; }
  printf '\n// ---- prelude: %s ----\n' "$(basename "$prelude")" >> "$out"
  cat "$dir/$prelude" >> "$out"
fi
if grep -q '\${[A-Z_][A-Z0-9_]*}' "$out"; then
  echo "instantiate: unsubstituted placeholders in $out: $(grep -o '\${[A-Z_][A-Z0-9_]*}' "$out" | sort -u | tr '\n' ' ')" >&2
  exit 2
fi
echo "$out"

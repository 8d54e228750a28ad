#!/usr/bin/env python3
"""The parameters of the fastest verified `alone` row of a template in a bench_chains.py result:
  best_params.py STREAM.json TEMPLATE [DEFAULT]   ->  P=V,... (only the overrides the row was run with)
prints DEFAULT when no row of TEMPLATE passed. For chaining a diagnosis onto a session in one call."""
import json, sys

rows = json.load(open(sys.argv[1]))["rows"]
best = None
for r in rows:
    d = r.get("design", "")
    if r.get("mode") != "alone" or not d.startswith(sys.argv[2] + "@") or d.endswith("@defaults"):
        continue
    if not (r.get("verify") or {}).get("passed") or r.get("median_ns") is None:
        continue
    if best is None or r["median_ns"] < best["median_ns"]:
        best = r
print(best["design"].split("@", 1)[1] if best else (sys.argv[3] if len(sys.argv) > 3 else ""))

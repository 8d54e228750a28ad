#!/usr/bin/env python3
"""The include graph of npuopt's layers, checked against the dependencies CMakeLists.txt declares.

Every `#include "<layer>/..."` in src/<from>/ is an edge from -> layer. An edge is allowed when
<layer> is <from> itself or one of the layers <from> depends on, directly or transitively, through
the `set(deps_<from> ...)` lines of CMakeLists.txt (the same lists the build links by and that give
each layer its include directory, so the build refuses an undeclared include too). Prints the
graph (edge counts per layer pair) and every edge that is not allowed, and every include of a
third-party library outside the layers that own it; exits 1 when there is one.

    tools/layering/include_graph.py [--root DIR] [--json] [--dot FILE]
"""
import argparse
import json
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([a-z_]+)/[^"]+"', re.M)
SYSTEM_INCLUDE = re.compile(r'^\s*#\s*include\s*<([^>]+)>', re.M)
# Each third-party library lives in the layers named here (../shared/STYLE.md): an include of it
# anywhere else is a violation.
THIRD_PARTY = {
    "spdlog": (re.compile(r"^spdlog/"), {"core"}),
    "sqlite3": (re.compile(r"^sqlite3\.h$"), {"store"}),
    "curl": (re.compile(r"^curl/"), {"llm"}),
    "yaml-cpp": (re.compile(r"^yaml-cpp/"), {"config"}),
    "CLI11": (re.compile(r"^CLI/"), {"cli"}),
    "Eigen": (re.compile(r"^Eigen/"), {"numerics"}),
    "cmark-gfm": (re.compile(r"^cmark"), {"knowledge"}),
    "muparser": (re.compile(r"^muParser"), {"numerics", "search"}),
    "zlib": (re.compile(r"^zlib\.h$"), {"store"}),
    "mustache": (re.compile(r"^kainjow/"), {"llm"}),
    "cpp-httplib": (re.compile(r"^httplib\.h$"), {"report"}),
}
DEPS = re.compile(r'^set\(deps_([a-z_]+)((?:\s+[^)\s]+)*)\s*\)', re.M)
LAYERS = re.compile(r'^set\(NPUOPT_LAYERS((?:\s+[a-z_]+)+)\s*\)', re.M)


def declared(cmake_text):
    layers = LAYERS.search(cmake_text)
    if not layers:
        sys.exit("include_graph: CMakeLists.txt has no set(NPUOPT_LAYERS ...)")
    order = layers.group(1).split()
    deps = {layer: set() for layer in order}
    for match in DEPS.finditer(cmake_text):
        layer = match.group(1)
        for item in match.group(2).split():
            if item.startswith("npuopt_") and item[len("npuopt_"):] in deps:
                deps.setdefault(layer, set()).add(item[len("npuopt_"):])
    closure = {}
    def reach(layer, seen=()):
        if layer in closure:
            return closure[layer]
        if layer in seen:
            sys.exit(f"include_graph: the declared dependencies have a cycle through {layer}")
        result = set()
        for dep in deps.get(layer, ()):
            result |= {dep} | reach(dep, seen + (layer,))
        closure[layer] = result
        return result
    for layer in order:
        reach(layer)
    return order, closure


def edges(src):
    found = {}
    for path in sorted(src.glob("*/*")):
        if path.suffix not in (".hpp", ".cpp", ".h"):
            continue
        origin = path.parent.name
        for target in INCLUDE.findall(path.read_text(errors="replace")):
            if (src / target).is_dir():
                found.setdefault((origin, target), []).append(str(path.relative_to(src.parent)))
    return found


def third_party(src):
    """(library, layer, file) for every include of a third-party library outside its layers."""
    found = []
    for path in sorted(src.glob("*/*")):
        if path.suffix not in (".hpp", ".cpp", ".h"):
            continue
        layer = path.parent.name
        for header in SYSTEM_INCLUDE.findall(path.read_text(errors="replace")):
            for library, (pattern, layers) in THIRD_PARTY.items():
                if pattern.search(header) and layer not in layers:
                    found.append({"library": library, "layer": layer, "file": str(path.relative_to(src.parent)),
                                  "allowed": sorted(layers)})
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parents[2], type=pathlib.Path)
    parser.add_argument("--json", action="store_true", help="print the graph as JSON")
    parser.add_argument("--dot", type=pathlib.Path, help="also write the graph as Graphviz DOT")
    args = parser.parse_args()
    cmake = args.root / "CMakeLists.txt"
    order, allowed = declared(cmake.read_text())
    graph = edges(args.root / "src")
    unknown = sorted({origin for origin, _ in graph} - set(order))
    violations = []
    for (origin, target), files in sorted(graph.items()):
        if origin == target:
            continue
        if origin in unknown or target not in allowed.get(origin, set()):
            violations.append({"from": origin, "to": target, "files": sorted(set(files))})
    misplaced = third_party(args.root / "src")
    if args.json:
        print(json.dumps({"layers": order, "third_party_violations": misplaced,
                          "edges": [{"from": o, "to": t, "includes": len(f)} for (o, t), f in sorted(graph.items()) if o != t],
                          "violations": violations, "undeclared_layers": unknown}, indent=2))
    else:
        print(f"layers (bottom to top): {' '.join(order)}")
        width = max(len(layer) for layer in order) if order else 8
        for origin in order:
            targets = [(t, len(f)) for (o, t), f in sorted(graph.items()) if o == origin and t != origin]
            targets.sort(key=lambda item: order.index(item[0]) if item[0] in order else 99)
            listed = ", ".join(f"{t} ({n})" for t, n in targets) or "-"
            print(f"  {origin:<{width}} includes {listed}")
        print(f"{sum(1 for (o, t) in graph if o != t)} layer edges, {len(violations)} not declared"
              f"{', undeclared layers: ' + ' '.join(unknown) if unknown else ''}")
        for violation in violations:
            print(f"  NOT ALLOWED: {violation['from']} -> {violation['to']}: {', '.join(violation['files'])}")
        print(f"{len(misplaced)} includes of a third-party library outside its layers")
        for item in misplaced:
            print(f"  NOT ALLOWED: {item['file']} includes {item['library']} (only {', '.join(item['allowed'])})")
    if args.dot:
        lines = ["digraph layers {", "  rankdir=BT; node [shape=box, fontname=Helvetica];"]
        for (origin, target), files in sorted(graph.items()):
            if origin != target:
                bad = any(v["from"] == origin and v["to"] == target for v in violations)
                lines.append(f'  "{origin}" -> "{target}" [label="{len(files)}"{", color=red" if bad else ""}];')
        lines.append("}")
        args.dot.write_text("\n".join(lines) + "\n")
    return 1 if violations or unknown or misplaced else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The longest functions (or classes) under src/ (or in a git revision), by lines from signature to closing brace.

A rough scanner, not a parser: a function is a line that opens a brace after a ')' (optionally
followed by const/override/noexcept/-> type) at namespace or class depth, up to its matching brace.
Lambdas and blocks inside a function count toward it.

    tools/layering/function_sizes.py [--rev REV] [--top N]
"""
import argparse
import pathlib
import re
import subprocess
import sys

SIGNATURE = re.compile(r"\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(final\s*)?(->\s*[\w:<>,\s*&]+)?\s*(:[^{;]*)?\{\s*$")
CLASS = re.compile(r"^\s*(?:struct|class)\s+([\w:]+)[^;()]*\{\s*$")
NAME = re.compile(r"([~\w:]+)\s*\((?:[^()]|\([^()]*\))*\)$")


def files(root, rev):
    if rev:
        listing = subprocess.run(["git", "-C", root, "ls-tree", "-r", "--name-only", rev, "src"],
                                 capture_output=True, text=True, check=True).stdout.split()
        for name in listing:
            if name.endswith(".cpp") or name.endswith(".hpp"):
                text = subprocess.run(["git", "-C", root, "show", f"{rev}:{name}"], capture_output=True,
                                      text=True, check=True).stdout
                yield name, text
    else:
        for path in sorted(pathlib.Path(root, "src").rglob("*")):
            if path.suffix in (".cpp", ".hpp"):
                yield str(path.relative_to(root)), path.read_text(errors="replace")


def functions(name, text):
    lines = text.split("\n")
    depth = 0
    result = []
    start = None
    start_depth = 0
    header = ""
    for index, line in enumerate(lines):
        code = re.sub(r'"(\\.|[^"\\])*"', '""', line.split("//")[0])
        if start is None and CLASS.search(code):
            start, start_depth, header = index, depth, "class " + CLASS.search(code).group(1)
        elif start is None and SIGNATURE.search(code) and not re.match(r"\s*(if|for|while|switch|catch)\b", code):
            joined = " ".join(l.split("//")[0] for l in lines[max(0, index - 4):index + 1])
            match = NAME.search(joined[: joined.rfind(")") + 1])
            if match and match.group(1) not in ("if", "for", "while", "switch", "catch", "return"):
                start, start_depth, header = index, depth, match.group(1)
        depth += code.count("{") - code.count("}")
        if start is not None and depth <= start_depth:
            result.append((index - start + 1, header, f"{name}:{start + 1}"))
            start = None
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parents[2]))
    parser.add_argument("--rev", help="a git revision instead of the working tree")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--classes", action="store_true", help="list classes and structs instead of functions")
    args = parser.parse_args()
    found = []
    for name, text in files(args.root, args.rev):
        found.extend(functions(name, text))
    found = [item for item in found if item[1].startswith("class ") == args.classes]
    found.sort(reverse=True)
    for lines, header, where in found[: args.top]:
        print(f"{lines:5d}  {header:45s} {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

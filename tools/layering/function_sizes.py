#!/usr/bin/env python3
"""The longest function bodies (or classes) in src/, in the working tree or a git revision.

    tools/layering/function_sizes.py [--top N] [--classes] [--rev REV] [--code-only] [--over LINES]

A size is the number of lines from the line of a body's opening brace to the line of its
closing brace, both included. It is a brace-matching scan of .cpp and .hpp files, not a parser;
its heuristics:

- Comments, string literals (raw strings included), and character literals are blanked first,
  keeping line breaks, so a brace in a literal or comment never counts.
- A `{` opens a function body when, after skipping trailing qualifiers (const, noexcept(...),
  override, final, mutable, & and &&, a trailing `-> type`) and a constructor's member
  initialiser list (`: a(x), b{y}`), it follows `name(...)`, where `name` is not a keyword
  (if, for, while, switch, catch, return, ...). `name` is the identifier (with its `A::B::`
  qualification, or `operator…`) before the parenthesis.
- A `{` opens a class when the tokens since the previous `;`, `{` or `}` begin with class,
  struct or union (after an optional template<...>), and not with enum.
- `namespace … {` and `extern "C" {` are transparent. Every other `{` (a block, a lambda, a
  brace initialiser) belongs to the function or class around it.
- A function or class nested in a function body counts toward that function and is not listed;
  a member function defined inside a class is listed on its own, named Class::member (and also
  counts toward its class).
- A function whose body is mostly (over half its lines) multi-line raw string literal is marked
  [data]: a table of SQL or a YAML template rather than logic. --code-only leaves those out.
"""
import argparse
import pathlib
import re
import subprocess
import sys

KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "alignof", "decltype", "typeid",
            "static_assert", "noexcept", "requires", "throw", "new", "delete", "co_return", "co_await"}
QUALIFIERS = {"const", "override", "final", "mutable", "volatile", "&", "&&", "try"}
TOKEN = re.compile(r"[A-Za-z_]\w*|::|->|&&|\d[\w.']*|\S")


def blank_literals(text):
    """The text with comments and literals replaced by spaces (line breaks kept), and the lines
    that lie in a raw string literal of more than one line."""
    out = []
    literal_lines = set()
    line = 0
    index = 0
    length = len(text)

    def blank(segment):
        return "".join("\n" if ch == "\n" else " " for ch in segment)

    while index < length:
        ch = text[index]
        if text.startswith("//", index):
            end = text.find("\n", index)
            end = length if end < 0 else end
            out.append(blank(text[index:end]))
            index = end
            continue
        if text.startswith("/*", index):
            end = text.find("*/", index + 2)
            end = length if end < 0 else end + 2
            segment = text[index:end]
            out.append(blank(segment))
            line += segment.count("\n")
            index = end
            continue
        raw = re.match(r'(?:u8|[uUL])?R"([^()\\\s]{0,16})\(', text[index:index + 24])
        if raw and (index == 0 or not (text[index - 1].isalnum() or text[index - 1] == "_")):
            closing = ")" + raw.group(1) + '"'
            end = text.find(closing, index + raw.end())
            end = length if end < 0 else end + len(closing)
            segment = text[index:end]
            if "\n" in segment:
                literal_lines.update(range(line, line + segment.count("\n") + 1))
            out.append('""' + blank(segment[2:]))
            line += segment.count("\n")
            index = end
            continue
        if ch == '"' or (ch == "'" and not (index > 0 and text[index - 1].isalnum())):
            end = index + 1
            while end < length and text[end] != ch and text[end] != "\n":
                end += 2 if text[end] == "\\" else 1
            end = min(end + 1, length)
            out.append(ch + blank(text[index + 1:end - 1]) + ch)
            index = end
            continue
        if ch == "\n":
            line += 1
        out.append(ch)
        index += 1
    return "".join(out), literal_lines


def tokenize(clean):
    """(token, line) pairs of the blanked text."""
    tokens = []
    line = 0
    position = 0
    for match in TOKEN.finditer(clean):
        line += clean.count("\n", position, match.start())
        position = match.start()
        tokens.append((match.group(0), line))
    return tokens


def match_back(tokens, index, open_ch, close_ch):
    """Index of the token that opens the group closed at `index`, or -1."""
    depth = 0
    while index >= 0:
        token = tokens[index][0]
        if token == close_ch:
            depth += 1
        elif token == open_ch:
            depth -= 1
            if depth == 0:
                return index
        index -= 1
    return -1


def name_before(tokens, index):
    """The (possibly qualified) name ending at token `index`, and the index before it."""
    parts = []
    while index >= 0:
        token = tokens[index][0]
        if re.match(r"[A-Za-z_~]", token):
            parts.append(token)
            index -= 1
            if index >= 0 and tokens[index][0] == "~":
                parts[-1] = "~" + parts[-1]
                index -= 1
            if index >= 0 and tokens[index][0] == "::":
                parts.append("::")
                index -= 1
                continue
        elif token == ">" and parts == []:
            return None, index  # `Foo<T>(...)`: a call or a cast, not a definition here
        break
    return "".join(reversed(parts)) or None, index


def classify(tokens, brace):
    """('function', name) | ('class', name) | ('namespace', '') | ('block', '') for the `{` at `brace`."""
    head_start = brace - 1
    while head_start >= 0 and tokens[head_start][0] not in (";", "{", "}"):
        head_start -= 1
    head = [token for token, _ in tokens[head_start + 1:brace]]
    if head[:1] == ["namespace"] or (head[:1] == ["extern"] and len(head) <= 2) or (
            len(head) >= 2 and head[0] == "inline" and head[1] == "namespace"):
        return "namespace", ""
    if head and head[0] == "template" and "class" not in head[:1]:
        depth = 0
        for position, token in enumerate(head):
            depth += token == "<"
            depth -= token == ">"
            if depth == 0 and token == ">":
                head = head[position + 1:]
                break
    if head and head[0] in ("class", "struct", "union") and "(" not in head and "=" not in head:
        names = [token for token in head[1:] if re.match(r"[A-Za-z_]", token) or token == "::"]
        stop = next((position for position, token in enumerate(head[1:], 1) if token in (":", "final", "{")), len(head))
        return "class", "".join(token for token in head[1:stop] if re.match(r"[A-Za-z_]", token) or token == "::") or (
            names[0] if names else "?")
    if head and head[0] == "enum":
        return "block", ""
    index = brace - 1
    # trailing qualifiers and a trailing return type
    while index >= 0:
        token = tokens[index][0]
        if token in QUALIFIERS:
            index -= 1
            continue
        if token == ")":
            opening = match_back(tokens, index, "(", ")")
            if opening > 0 and tokens[opening - 1][0] == "noexcept":
                index = opening - 2
                continue
        arrow = index
        while arrow >= 0 and tokens[arrow][0] not in ("->", ")", ";", "{", "}", "=", "("):
            arrow -= 1
        if arrow >= 0 and tokens[arrow][0] == "->" and arrow != index:
            index = arrow - 1
            continue
        break
    if index < 0:
        return "block", ""
    # a member initialiser list: `) : a(x), b{y} {`
    while tokens[index][0] in (")", "}"):
        closing = tokens[index][0]
        opening = match_back(tokens, index, "(" if closing == ")" else "{", closing)
        if opening <= 0:
            return "block", ""
        name, before = name_before(tokens, opening - 1)
        if closing == "}" and (name is None or before < 0 or tokens[before][0] not in (",", ":")):
            return "block", ""
        if name is None or name.split("::")[-1] in KEYWORDS:
            return "block", ""
        if before >= 0 and tokens[before][0] in (",", ":") and closing in (")", "}"):
            # an initialiser `name(...)` or `name{...}`: go on to the one before it, or the signature
            index = before - 1
            if tokens[before][0] == ":" and index >= 0 and tokens[index][0] == ")":
                continue
            if tokens[before][0] == ",":
                continue
            return "block", ""  # `case x:` or a bit-field, not a signature
        if closing == ")":
            if before >= 0 and tokens[before][0] in (".", "->", "=", "return", "(", ",", "!", "&&", "||", "?"):
                return "block", ""
            if before >= 0 and tokens[before][0] == "operator":
                return "function", "operator"
            return "function", name
        return "block", ""
    return "block", ""


def functions(path, text):
    clean, literal_lines = blank_literals(text)
    tokens = tokenize(clean)
    found = []
    stack = []  # (kind, name, start_line)
    for index, (token, line) in enumerate(tokens):
        if token == "{":
            inside_function = any(kind == "function" for kind, _, _ in stack)
            kind, name = ("block", "") if inside_function else classify(tokens, index)
            stack.append((kind, name, line))
        elif token == "}" and stack:
            kind, name, start = stack.pop()
            if kind not in ("function", "class"):
                continue
            owners = [owner for owner_kind, owner, _ in stack if owner_kind == "class"]
            qualified = "::".join(owners + [name])
            lines = line - start + 1
            data = sum(1 for number in range(start, line + 1) if number in literal_lines) * 2 > lines
            found.append((lines, kind, qualified, f"{path}:{start + 1}", data))
    return found


def files(root, rev):
    if rev:
        listing = subprocess.run(["git", "-C", root, "ls-tree", "-r", "--name-only", rev, "src"],
                                 capture_output=True, text=True, check=True).stdout.split()
        for name in listing:
            if name.endswith(".cpp") or name.endswith(".hpp"):
                yield name, subprocess.run(["git", "-C", root, "show", f"{rev}:{name}"], capture_output=True,
                                           text=True, check=True).stdout
    else:
        for path in sorted(pathlib.Path(root, "src").rglob("*")):
            if path.suffix in (".cpp", ".hpp"):
                yield str(path.relative_to(root)), path.read_text(errors="replace")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parents[2]))
    parser.add_argument("--rev", help="a git revision instead of the working tree")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--over", type=int, help="every one longer than this many lines, instead of --top")
    parser.add_argument("--classes", action="store_true", help="classes and structs instead of functions")
    parser.add_argument("--code-only", action="store_true", help="leave out functions that are mostly literal")
    args = parser.parse_args()
    found = []
    for name, text in files(args.root, args.rev):
        found.extend(functions(name, text))
    wanted = "class" if args.classes else "function"
    found = [item for item in found if item[1] == wanted and not (args.code_only and item[4])]
    found.sort(key=lambda item: (-item[0], item[3]))
    selected = [item for item in found if item[0] > args.over] if args.over is not None else found[: args.top]
    for lines, _, qualified, where, data in selected:
        print(f"{lines:5d}  {qualified + (' [data]' if data else ''):55s} {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Lists the functions longer than a limit (default 80 lines, from the line that opens the body
to its closing brace) in the C++ sources under the given folders, longest first; exit 1 if any.

A function is found where a declaration that starts at namespace level (no indentation; its
signature may wrap onto indented lines) ends with '{' and is not a namespace, class, struct, enum,
union or an initialiser; its body ends at the first line that is exactly '}' or '};'. Lambdas and member functions defined in a class body are part of their
enclosing function or class and are not measured on their own. A table that must be long (a
function that only lists data, field by field) opts out with a comment line
'// function-length: table' right above its signature.

Usage: function_length.py [--limit N] ROOT FOLDER...
"""
import argparse
import os
import re
import sys

SKIP = re.compile(r'^(namespace|class|struct|enum|union|extern|template\s*<[^>]*>\s*(class|struct))\b')


def signature_start(lines, i):
    """The first line of the declaration that ends on line i (a signature may wrap)."""
    j = i
    while j > 0 and lines[j][:1].isspace():
        prev = lines[j - 1]
        if not prev.strip() or prev.lstrip().startswith(('//', '#')) or \
                prev.rstrip().endswith((';', '{', '}')):
            break
        j -= 1
    return j


def functions(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        lines = f.read().split('\n')
    start = None
    for i, line in enumerate(lines):
        if start is None:
            if not line.rstrip().endswith('{'):
                continue
            j = signature_start(lines, i)
            first = lines[j]
            if (first and not first[0].isspace() and not SKIP.match(first) and
                    '=' not in first.split('(')[0] and not first.startswith(('#', '//', '}'))):
                start, sig = i, j
        elif line in ('}', '};'):
            if sig == 0 or 'function-length: table' not in lines[sig - 1]:
                yield lines[sig].strip(), sig + 1, i - start + 1
            start = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--limit', type=int, default=80)
    ap.add_argument('root')
    ap.add_argument('folders', nargs='+')
    args = ap.parse_args()
    long = []
    for folder in args.folders:
        for dirpath, _, names in os.walk(os.path.join(args.root, folder)):
            for name in sorted(names):
                if name.endswith(('.cc', '.cu', '.h', '.cuh')):
                    path = os.path.join(dirpath, name)
                    for sig, line, n in functions(path):
                        if n > args.limit:
                            long.append((n, os.path.relpath(path, args.root), line, sig))
    for n, path, line, sig in sorted(long, reverse=True):
        print(f'{path}:{line}: {n} lines: {sig[:90]}')
    if long:
        print(f'function_length: {len(long)} function(s) over {args.limit} lines; split them '
              'into named steps')
        return 1
    print(f'function_length: no function over {args.limit} lines')
    return 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""Lists the functions that declare more than a limit (default 8) of parameters in the C++ and
CUDA sources under the given folders (host functions and __global__ kernels alike); exit 1 if any.
Such a function takes an argument struct instead (docs/architecture.md).

A regex-level parser, no compiler: comments, string literals and preprocessor lines (macros with
their continuations) are blanked, then braces are followed. Only namespace and class scope are
read (function bodies, initialisers and enum bodies are skipped, so calls and lambdas never count);
there every statement (the text between ';', '{' and '}') whose first parenthesis follows a name,
with no '=' before it, is a function declaration or definition, and its parameters are the
top-level commas of that parenthesis plus one. Names in capitals (macro calls such as
INSTANTIATE(float)) and compiler words (__launch_bounds__, alignas, decltype, ...) are not
functions, and an explicit instantiation ('template void f<float>(...);') is its template's
declaration again, so it is not counted twice. A declaration that must keep a wide signature (an external API such as CBLAS's) opts out
with a comment line '// param-count: <why>' right above it.

Usage: param_count.py [--limit N] ROOT FOLDER...
"""
import argparse
import os
import re
import sys

# Words followed by a parenthesis that are not the function's name.
NOT_NAMES = {'__launch_bounds__', '__attribute__', '__declspec', 'alignas', 'decltype',
             'noexcept', 'sizeof', 'alignof', 'static_assert', 'throw', 'requires', 'explicit'}
MACRO = re.compile(r'^[A-Z][A-Z0-9_]*$')
OPT_OUT = '// param-count:'


def blank(text):
    """text with comments, string and character literals and preprocessor lines replaced by
    spaces (newlines kept, so offsets map to the same lines)."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == '#':
            # A preprocessor line, with its backslash continuations.
            while i < n and text[i] != '\n':
                if text[i] == '\\' and i + 1 < n and text[i + 1] == '\n':
                    out[i] = ' '
                    i += 2
                    continue
                out[i] = ' '
                i += 1
            continue
        if c == '\n':
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith('//', i):
            while i < n and text[i] != '\n':
                out[i] = ' '
                i += 1
            continue
        if text.startswith('/*', i):
            end = text.find('*/', i + 2)
            end = n if end < 0 else end + 2
            for j in range(i, end):
                if out[j] != '\n':
                    out[j] = ' '
            i = end
            continue
        if c in '"\'':
            if c == '\'' and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            for k in range(i + 1, min(j, n)):
                out[k] = ' '
            i = j + 1
            continue
        i += 1
    return ''.join(out)


def skip_template_prefix(s):
    """s without leading 'template <...>' clauses (their default arguments hold '=')."""
    while True:
        m = re.match(r'\s*template\s*<', s)
        if not m:
            return s
        depth, i = 1, m.end()
        while i < len(s) and depth:
            depth += {'<': 1, '>': -1}.get(s[i], 0)
            i += 1
        s = s[i:]


def matching(s, i):
    """The index just past the parenthesis that closes s[i] == '('."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == '(':
            depth += 1
        elif s[j] == ')':
            depth -= 1
            if depth == 0:
                return j + 1
    return len(s)


def count_params(inside):
    """The parameters in the text between a declaration's parentheses."""
    if not inside.strip() or inside.strip() == 'void':
        return 0
    depth, angle, n = 0, 0, 1
    i = 0
    while i < len(inside):
        c = inside[i]
        if c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        elif inside.startswith('<<', i):
            i += 1
        elif c == '<':
            angle += 1
        elif c == '>':
            angle = max(0, angle - 1)
        elif c == ',' and depth == 0 and angle == 0:
            n += 1
        i += 1
    return n


def declared(stmt):
    """(name, parameter count, offset of the name) when stmt declares a function, else None."""
    body = skip_template_prefix(stmt)
    head = len(stmt) - len(body)
    if re.match(r'\s*(using|typedef|friend\s+class|return|case)\b', body):
        return None
    if re.match(r'\s*(extern\s+)?template\b', body):
        return None  # an explicit instantiation repeats its template's parameters
    if re.match(r'\s*[,:]', body):  # a constructor's member initialisers
        return None
    i = 0
    while True:
        i = body.find('(', i)
        if i < 0:
            return None
        before = body[:i].rstrip()
        op = re.search(r'\boperator\s*(\(\s*\)|\[\s*\]|[^\w\s(]+|\s\w[\w\s:<>*&]*)$', before)
        if op is None and before.endswith('operator') and body[i:matching(body, i)].strip() == '()':
            i = matching(body, i)  # operator(): its parameters are in the next parenthesis
            continue
        name_m = re.search(r'(~?[A-Za-z_]\w*)\s*(<[^;{}()]*>)?$', before)
        if op is not None:
            name, start = 'operator' + op.group(1).strip(), op.start()
        elif name_m is None:
            return None
        else:
            name, start = name_m.group(1), name_m.start()
        if name in NOT_NAMES or name.startswith('__'):
            i = matching(body, i)
            continue
        if MACRO.match(name) and op is None:
            return None
        if '=' in re.sub(r'\boperator\s*\S+', '', before[:start]):
            return None  # an initialiser: x = f(...)
        end = matching(body, i)
        return name, count_params(body[i + 1:end - 1]), head + start


def opens_declarations(stmt):
    """Whether the '{' after stmt opens a scope of declarations (namespace, class, extern)."""
    s = skip_template_prefix(stmt)
    if re.search(r'\bnamespace\b', s) or re.match(r"\s*extern\s*(\"\s*\"\s*)?$", s):
        return True
    if re.search(r'\benum\b', s):
        return False
    return re.search(r'\b(class|struct|union)\b', s) is not None and '(' not in s


def violations(path, limit):
    with open(path, encoding='utf-8', errors='replace') as f:
        raw = f.read()
    text = blank(raw)
    raw_lines = raw.split('\n')
    line_of = [0] * (len(text) + 1)
    ln = 1
    for k, ch in enumerate(text):
        line_of[k] = ln
        ln += ch == '\n'
    scopes = []  # True: declarations are read there
    start = 0
    found = []
    for k, ch in enumerate(text):
        if ch not in ';{}':
            continue
        in_decls = all(scopes)
        stmt = text[start:k]
        if in_decls and ch in ';{':
            d = declared(stmt)
            if d and d[1] > limit:
                lead = re.match(r'(\s|(public|protected|private)\s*:)*', stmt).end()
                first = start + lead
                line = line_of[first]
                above = raw_lines[line - 2].strip() if line >= 2 else ''
                if not above.startswith(OPT_OUT):
                    found.append((line, d[0], d[1]))
        if ch == '{':
            scopes.append(in_decls and opens_declarations(stmt) and
                          not (declared(stmt) if in_decls else None))
        elif ch == '}' and scopes:
            scopes.pop()
        start = k + 1
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--limit', type=int, default=8)
    ap.add_argument('root')
    ap.add_argument('folders', nargs='+')
    args = ap.parse_args()
    wide = []
    for folder in args.folders:
        for dirpath, _, names in sorted(os.walk(os.path.join(args.root, folder))):
            for name in sorted(names):
                if name.endswith(('.cc', '.cu', '.h', '.cuh')):
                    path = os.path.join(dirpath, name)
                    for line, fn, n in violations(path, args.limit):
                        wide.append((os.path.relpath(path, args.root), line, fn, n))
    for path, line, fn, n in wide:
        print(f'{path}:{line}: {n} parameters: {fn}')
    if wide:
        print(f'param_count: {len(wide)} function(s) with more than {args.limit} parameters; '
              'group them into an argument struct')
        return 1
    print(f'param_count: no function with more than {args.limit} parameters')
    return 0


if __name__ == '__main__':
    sys.exit(main())

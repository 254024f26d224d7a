#!/usr/bin/env python3
"""Counts that say how the appliance's C reads, for the restructuring
notes: files per folder, bare -1 results, database writes whose result
is dropped, and the longest functions.  Heuristic by design (it reads
text, not an AST); the include-cycle check is scripts/check-deps.py.

    scripts/tree-report.py [DIR ...]      (default: appliance)
"""
import collections
import os
import re
import sys

BARE = re.compile(r'\breturn\s+-[12]\s*;|\b(rc|ok|ret|where)\s*=\s*-[12]\s*;|return[^;]*(\?\s*-[12]\s*:|:\s*-[12]\s*;)|, -[12];')
# a statement that starts with the call: its result goes nowhere
DROPPED = re.compile(r'^\s+(?:\(void\)\s*)?(sqlite3_step|sqlite3_exec|db_exec)\s*\([^<>=!]*$')


def c_files(roots):
    for root in roots:
        for d, _, names in os.walk(root):
            for n in sorted(names):
                if n.endswith(('.c', '.h')):
                    yield os.path.join(d, n)


def functions(path, text):
    """(lines, name) for each top-level function: a line at column 0
    ending the signature, then '{' ... '}' at column 0."""
    lines = text.split('\n')
    out = []
    start = None
    name = None
    for i, line in enumerate(lines):
        if line == '{' and i > 0:
            start = i
            # the name is the last identifier before '(' in the lines above
            sig = ' '.join(lines[max(0, i - 4):i])
            m = re.findall(r'([A-Za-z_]\w*)\s*\(', sig)
            name = m[-1] if m else '?'
        elif line.startswith('}') and start is not None:
            out.append((i - start + 1, '%s:%s' % (path, name)))
            start = None
    return out


def main(argv):
    roots = argv[1:] or ['appliance']
    per_dir = collections.Counter()
    bare = collections.Counter()
    dropped = []
    funcs = []
    for path in c_files(roots):
        per_dir[os.path.dirname(path)] += 1
        with open(path, encoding='utf-8') as f:
            text = f.read()
        for n, line in enumerate(text.split('\n'), 1):
            if BARE.search(line):
                bare[path] += 1
            if DROPPED.match(re.sub(r'"(\\.|[^"\\])*"', '""', line).replace('->', '.')):
                dropped.append('%s:%d: %s' % (path, n, line.strip()))
        if path.endswith('.c'):
            funcs.extend(functions(path, text))
    print('files per folder:')
    for d in sorted(per_dir):
        print('  %4d  %s' % (per_dir[d], d))
    print('bare -1/-2 results (return -1, rc = -1): %d in %d files' % (sum(bare.values()), len(bare)))
    print('database calls whose result is dropped: %d' % len(dropped))
    for d in dropped:
        print('  ' + d)
    funcs.sort(reverse=True)
    print('longest functions (lines):')
    for n, name in funcs[:5]:
        print('  %4d  %s' % (n, name))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

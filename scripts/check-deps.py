#!/usr/bin/env python3
"""privai-admin's layers, checked: no dependency cycles between its
files, and dependencies that point one way only (api -> http -> domain ->
store).  Run by `make lint`; exits 1 and names each offence.

A dependency is read two ways, since C hides one behind the other:
  - by symbol: file A's object calls or reads a symbol file B's defines
    (nm over the build), which is what links them;
  - by include: file A includes a header of a folder above its own.
A cycle is a strongly connected set of two or more objects.

    scripts/check-deps.py BUILD_DIR
"""
import os
import re
import subprocess
import sys

ADMIN = 'appliance/admin'
# lower may never depend on higher; equal ranks may (no cycles, though)
RANK = {
    'store': 0, 'core': 0,
    'auth': 1, 'gpu': 1, 'models': 1, 'backup': 1, 'deploy': 1,
    'cluster': 1, 'metrics': 1, 'vm': 1,
    'http': 2,
    'api': 3,
    'main': 4,
}


def folder(rel):
    """rel: path under appliance/admin; top-level files are the core,
    except seed.c, which fills the store through the domains."""
    parts = rel.split('/')
    if len(parts) == 1:
        return 'domain-seed' if parts[0].startswith('seed.') else 'core'
    return parts[0]


def rank(f):
    return 1 if f == 'domain-seed' else RANK.get(f)


def symbols(obj):
    out = subprocess.run(['nm', '-g', obj], capture_output=True, text=True,
                         check=True).stdout
    defined, wanted = set(), set()
    for line in out.splitlines():
        p = line.split()
        if len(p) == 2 and p[0] == 'U':
            wanted.add(p[1])
        elif len(p) == 3 and p[1] in 'TDBRCV':
            defined.add(p[2])
    return defined, wanted


def tarjan(graph):
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().split('\n')[-1].strip(), file=sys.stderr)
        return 2
    build = argv[1]
    objs = {}
    for d, _, names in os.walk(os.path.join(build, ADMIN)):
        for name in names:
            if name.endswith('.o'):
                path = os.path.join(d, name)
                rel = os.path.relpath(path, os.path.join(build, ADMIN))
                # an object left from a source since moved or removed
                if os.path.exists(os.path.join(ADMIN, rel[:-2] + '.c')):
                    objs[rel[:-2] + '.c'] = path
    if not objs:
        print('check-deps: no objects under %s/%s (build first)' % (build, ADMIN),
              file=sys.stderr)
        return 2
    defs, wants = {}, {}
    for rel, path in objs.items():
        d, w = symbols(path)
        wants[rel] = w
        for s in d:
            defs[s] = rel
    graph = {rel: set() for rel in objs}
    why = {}
    for rel in objs:
        for s in wants[rel]:
            to = defs.get(s)
            if to is not None and to != rel:
                graph[rel].add(to)
                why.setdefault((rel, to), []).append(s)
    bad = 0
    for comp in tarjan({k: v for k, v in graph.items()
                        if folder(k) != 'main'}):
        bad += 1
        print('cycle of %d: %s' % (len(comp), ' '.join(comp)))
    for (a, b), syms in sorted(why.items()):
        ra, rb = rank(folder(a)), rank(folder(b))
        if ra is None or rb is None:
            print('unknown folder: %s or %s (add it to RANK)' % (a, b))
            bad += 1
        elif ra < rb:
            print('upward: %s -> %s (%s)' % (a, b, ' '.join(sorted(syms)[:4])))
            bad += 1
    include = re.compile(r'^#include "([a-z_]+)/[a-z_]+\.h"', re.M)
    for rel in sorted(objs):
        for ext in ('.c', '.h'):
            src = os.path.join(ADMIN, rel[:-2] + ext)
            if not os.path.exists(src):
                continue
            with open(src, encoding='utf-8') as f:
                text = f.read()
            for m in include.finditer(text):
                rf, rt = rank(folder(rel)), RANK.get(m.group(1))
                if rt is not None and rf is not None and rf < rt:
                    print('upward include: %s includes %s' % (src, m.group(0)[10:-1]))
                    bad += 1
    # a domain or store header that names a request serves HTTP itself
    for d in sorted(RANK):
        if RANK[d] > 1 or d in ('core',):
            continue
        top = os.path.join(ADMIN, d)
        for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
            if name.endswith('.h'):
                with open(os.path.join(top, name), encoding='utf-8') as f:
                    if 'struct req *' in f.read():
                        print('HTTP in a lower layer: %s/%s declares a handler of struct req' % (top, name))
                        bad += 1
    print('check-deps: %d files, %d offences' % (len(objs), bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

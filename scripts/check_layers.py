#!/usr/bin/env python3
"""check_layers.py: fails on an #include that runs up the layers.

The layers are the xtrain_layer(NAME [DIR dir] ... DEPENDS ...) calls of src/CMakeLists.txt, the one
home of the table; a layer may include itself and what its DEPENDS reach, transitively. A tool
(xtrain_program(NAME SOURCE LINK xtrain_<layer>...) in tools/CMakeLists.txt) may include what the
layers it links reach. Each file of src/ belongs to the layer whose folder holds it most closely
(src/comm/mpi/x.h to comm_mpi, src/backend/cuda/y.cu to backend).

Usage: scripts/check_layers.py [REPO]   (exit 0: no include runs up; 1: one line per one that does)
"""
import os
import re
import sys

CALL = re.compile(r'^\s*(xtrain_layer|xtrain_program)\((.*?)\)\s*$', re.S | re.M)
KEYWORDS = {'DIR', 'SOURCES', 'DEPENDS', 'PUBLIC_LIBS', 'PRIVATE_LIBS', 'LINK'}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_EXT = ('.h', '.cpp', '.cu', '.cuh', '.c')


def calls(path, name):
    """The arguments of each call `name(...)` in a CMake file, as {keyword: [words]} plus 'name'."""
    text = re.sub(r'#[^\n]*', '', open(path).read())
    out = []
    for m in CALL.finditer(text):
        if m.group(1) != name:
            continue
        words = m.group(2).split()
        args, key = {'name': words[0], '': []}, ''
        for w in words[1:]:
            if w in KEYWORDS:
                key = w
                args.setdefault(key, [])
            else:
                args.setdefault(key, []).append(w)
        out.append(args)
    return out


def main(repo):
    layers = {}  # name -> (dir, direct deps)
    for a in calls(os.path.join(repo, 'src/CMakeLists.txt'), 'xtrain_layer'):
        layers[a['name']] = ((a.get('DIR') or [a['name']])[0], a.get('DEPENDS', []))
    if not layers:
        sys.exit('check_layers: no xtrain_layer calls in src/CMakeLists.txt')

    def reach(names):
        seen, todo = set(), list(names)
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            if n not in layers:
                sys.exit(f'check_layers: unknown layer {n} in src/CMakeLists.txt or tools/CMakeLists.txt')
            seen.add(n)
            todo.extend(layers[n][1])
        return seen

    by_dir = sorted(((d, n) for n, (d, _) in layers.items()), key=lambda x: -len(x[0]))

    def layer_of(rel):  # rel: a path under src/
        for d, n in by_dir:
            if rel.startswith(d + '/'):
                return n
        return None

    failures = []

    def check(path, allowed, who):
        text = open(path, errors='replace').read()
        for m in INCLUDE.finditer(text):
            target = layer_of(m.group(1))
            if target is None or target in allowed:
                continue
            line = text.count('\n', 0, m.start()) + 1
            failures.append(f'{os.path.relpath(path, repo)}:{line}: includes "{m.group(1)}" of layer {target}, '
                            f'above {who}, which may include only {", ".join(sorted(allowed))}')

    src = os.path.join(repo, 'src')
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(SOURCE_EXT):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)
            layer = layer_of(rel)
            if layer is None:
                failures.append(f'src/{rel}: in no layer folder (src/CMakeLists.txt)')
                continue
            check(os.path.join(root, f), reach([layer]), f'layer {layer}')
    tools_cmake = os.path.join(repo, 'tools/CMakeLists.txt')
    for a in calls(tools_cmake, 'xtrain_program'):
        links = [w[len('xtrain_'):] for w in a.get('LINK', []) if w.startswith('xtrain_')]
        check(os.path.join(repo, 'tools', a[''][0]), reach(links), f'tool {a["name"]} (LINK {" ".join(links)})')
    for f in failures:
        print(f)
    if failures:
        print(f'check_layers: {len(failures)} include(s) run up the layers; the table is src/CMakeLists.txt')
        return 1
    print(f'check_layers: ok ({len(layers)} layers; no include runs up)')
    return 0


if __name__ == '__main__':
    sys.exit(main(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))))

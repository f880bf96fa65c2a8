#!/usr/bin/env python3
"""check_layers.py: fails on an #include that runs up the layers or reaches past the public face.

The layers are the xtrain_layer(NAME [DIR dir] ... DEPENDS ...) calls of src/CMakeLists.txt, the one
home of the table; a layer may include itself and what its DEPENDS reach, transitively. A layer's files
are src/DIR/ (its sources and private headers, included as "DIR/x.h") and include/xtrain/DIR/ (its public
headers, included as <xtrain/DIR/x.h>); a file belongs to the layer whose folder holds it most closely
(src/comm/mpi/x.h to comm_mpi, src/backend/cuda/y.cu to backend). A program (xtrain_program(NAME SOURCE
LINK xtrain_<layer>...) in src/CMakeLists.txt) may include what the layers it links reach.

Three rules besides:
- a public header (include/xtrain/) includes only <xtrain/...> and standard C++ headers (<vector>, ...);
- a file outside src/ and include/ (tests, examples, benchmarks) includes only <xtrain/...>, the standard
  library, third-party headers and files beside it (held to the same rule), never a private header of
  src/ ("core/io.h" or <core/io.h>), unless it belongs to a target registered INTERNAL
  (xtrain_add_unit_test/xtrain_add_mpi_test ... INTERNAL, or xtrain_internal(target)): those test or
  time internals and may include src/'s private headers;
- every include of a layer's header names a file that exists.

Usage: scripts/check_layers.py [REPO]   (exit 0: no include runs up; 1: one line per one that does)
"""
import glob
import os
import re
import sys

CALL = re.compile(r'^\s*(\w+)\((.*?)\)\s*$', re.S | re.M)
KEYWORDS = {'DIR', 'SOURCES', 'DEPENDS', 'PUBLIC_LIBS', 'PRIVATE_LIBS', 'LINK', 'LABELS', 'TIMEOUT', 'RANKS',
            'INTERNAL', 'ARGS', 'PRIVATE', 'PUBLIC', 'SHARED', 'STATIC'}
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^">]+)[">]', re.M)
SOURCE_EXT = ('.h', '.hpp', '.cpp', '.cu', '.cuh', '.c')
STD_HEADER = re.compile(r'^[a-z_0-9]+$')  # <vector>, <cstdint>: no folder, no extension
OUTSIDE = ('tests', 'examples', 'bench', 'tools')  # folders whose code is held to the public face


def calls(path):
    """(function, {keyword: [words]} plus 'name' and '' for the words before a keyword) of each call."""
    text = re.sub(r'#[^\n]*', '', open(path).read())
    out = []
    for m in CALL.finditer(text):
        words = m.group(2).split()
        if not words:
            continue
        args, key = {'name': words[0], '': []}, ''
        for w in words[1:]:
            if w in KEYWORDS:
                key = w
                args.setdefault(key, [])
            else:
                args.setdefault(key, []).append(w)
        out.append((m.group(1), args))
    return out


def main(repo):
    src = os.path.join(repo, 'src')
    inc = os.path.join(repo, 'include', 'xtrain')
    layers = {}  # name -> (dir, direct deps)
    programs = []
    for fn, a in calls(os.path.join(src, 'CMakeLists.txt')):
        if fn == 'xtrain_layer':
            layers[a['name']] = ((a.get('DIR') or [a['name']])[0], a.get('DEPENDS', []))
        elif fn == 'xtrain_program':
            programs.append(a)
    if not layers:
        sys.exit('check_layers: no xtrain_layer calls in src/CMakeLists.txt')

    def reach(names):
        seen, todo = set(), list(names)
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            if n not in layers:
                sys.exit(f'check_layers: unknown layer {n} in src/CMakeLists.txt')
            seen.add(n)
            todo.extend(layers[n][1])
        return seen

    by_dir = sorted(((d, n) for n, (d, _) in layers.items()), key=lambda x: -len(x[0]))

    def layer_of(rel):  # rel: a path under src/ or under include/xtrain/
        for d, n in by_dir:
            if rel.startswith(d + '/'):
                return n
        return None

    def target_of(kind, name):
        """(layer, path) of an include "name" (kind '"') or <name> (kind '<'), or (None, None) if not ours."""
        if kind == '<' and name.startswith('xtrain/'):
            return layer_of(name[len('xtrain/'):]), os.path.join(repo, 'include', name)
        if kind == '"' and layer_of(name) is not None:
            return layer_of(name), os.path.join(src, name)
        return None, None

    failures = []

    def where(path, text, m):
        return f'{os.path.relpath(path, repo)}:{text.count(chr(10), 0, m.start()) + 1}'

    def check(path, allowed, who, public=False):
        text = open(path, errors='replace').read()
        for m in INCLUDE.finditer(text):
            kind, name = m.group(1), m.group(2)
            if public and not (kind == '<' and (name.startswith('xtrain/') or STD_HEADER.match(name))):
                failures.append(f'{where(path, text, m)}: the public header includes "{name}"; a public header '
                                f'includes only <xtrain/...> and standard C++ headers')
                continue
            target, file = target_of(kind, name)
            if target is None:
                continue
            if not os.path.exists(file):
                failures.append(f'{where(path, text, m)}: includes "{name}", which does not exist')
            elif target not in allowed:
                failures.append(f'{where(path, text, m)}: includes "{name}" of layer {target}, above {who}, '
                                f'which may include only {", ".join(sorted(allowed))}')

    program_sources = {os.path.join(src, a[''][0]): a for a in programs}
    for top, public in ((src, False), (inc, True)):
        for root, _, files in os.walk(top):
            for f in files:
                if not f.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(root, f)
                if path in program_sources:
                    a = program_sources[path]
                    links = [w[len('xtrain_'):] for w in a.get('LINK', []) if w.startswith('xtrain_')]
                    check(path, reach(links), f'program {a["name"]} (LINK {" ".join(links)})')
                    continue
                rel = os.path.relpath(path, top)
                layer = layer_of(rel)
                if layer is None:
                    failures.append(f'{os.path.relpath(path, repo)}: in no layer folder (src/CMakeLists.txt)')
                    continue
                check(path, reach([layer]), f'layer {layer}', public)

    # Outside src/: the INTERNAL targets' sources may reach inside; everything else sees the public face.
    internal = set()
    cmake_files = [os.path.join(repo, 'CMakeLists.txt')]
    for d in OUTSIDE + ('cmake',):
        for root, _, files in os.walk(os.path.join(repo, d)):
            cmake_files += [os.path.join(root, f) for f in files if f == 'CMakeLists.txt' or f.endswith('.cmake')]
    internal_targets, sources_of = set(), {}
    for cm in cmake_files:
        here = os.path.dirname(cm)
        for fn, a in calls(cm):
            words = [w for k, ws in a.items() if k not in ('name', 'LINK', 'LABELS', 'RANKS') for w in ws]
            srcs = []
            for w in words:
                if w.endswith(SOURCE_EXT):  # a ${variable} left (a foreach's) matches any name
                    w = w.replace('${PROJECT_SOURCE_DIR}', repo).replace('${CMAKE_CURRENT_SOURCE_DIR}', here)
                    srcs += glob.glob(os.path.join(here, re.sub(r'\$\{\w+\}', '*', w)))
            if fn in ('add_executable', 'add_library') or fn.startswith('xtrain_add_'):
                sources_of.setdefault(a['name'], []).extend(srcs)
                if 'INTERNAL' in a:
                    internal_targets.add(a['name'])
            elif fn == 'xtrain_internal':
                internal_targets.add(a['name'])
    for t in internal_targets:
        internal.update(os.path.normpath(p) for p in sources_of.get(t, []))

    def check_outside(path, seen):
        if path in seen:
            return
        seen.add(path)
        text = open(path, errors='replace').read()
        for m in INCLUDE.finditer(text):
            kind, name = m.group(1), m.group(2)
            beside = os.path.join(os.path.dirname(path), name)
            if kind == '"' and os.path.exists(beside):
                check_outside(os.path.normpath(beside), seen)  # a helper beside it: held to the same rule
                continue
            target, file = target_of(kind, name)
            if target is None and kind == '<' and layer_of(name) is not None and os.path.exists(os.path.join(src, name)):
                target, kind = layer_of(name), '"'  # <core/io.h>: a private header, however it is named
            if target is None:
                continue
            if kind == '"':
                failures.append(f'{where(path, text, m)}: includes the private header "{name}"; outside src/ '
                                f'only <xtrain/...> is seen, unless the target is registered INTERNAL')
            elif not os.path.exists(file):
                failures.append(f'{where(path, text, m)}: includes <{name}>, which does not exist')

    for d in OUTSIDE:
        for root, _, files in os.walk(os.path.join(repo, d)):
            for f in files:
                path = os.path.join(root, f)
                if f.endswith(SOURCE_EXT) and not f.endswith('.h') and path not in internal:
                    check_outside(path, set())

    for f in failures:
        print(f)
    if failures:
        print(f'check_layers: {len(failures)} include(s) run up the layers or past the public face; '
              f'the table is src/CMakeLists.txt')
        return 1
    print(f'check_layers: ok ({len(layers)} layers, {len(internal_targets)} internal targets; no include runs up)')
    return 0


if __name__ == '__main__':
    sys.exit(main(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))))

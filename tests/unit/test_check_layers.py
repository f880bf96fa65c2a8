"""scripts/check_layers.py on a copy of the tree with includes planted in it: the tree passes as it is; a
private header included from an example (either spelling, or through a helper header beside it), a layer
above a tool's links included by the tool, a private header in a public one, and a public header that does
not exist are each reported on their file and line, exit 1. So the examples are checked, not skipped."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_checks import check, failures, run_script  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(REPO, "scripts", "check_layers.py")
KEEP = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".c", ".cmake", "CMakeLists.txt")  # what the check reads


def copy_tree(dst):
    """The files check_layers reads: the top CMakeLists.txt and the sources and CMake files of its folders."""
    shutil.copy(os.path.join(REPO, "CMakeLists.txt"), dst)
    for d in ("src", "include", "tests", "examples", "bench", "tools", "cmake"):
        if os.path.isdir(os.path.join(REPO, d)):
            shutil.copytree(os.path.join(REPO, d), os.path.join(dst, d),
                            ignore=lambda folder, names: [n for n in names if not n.endswith(KEEP)
                                                          and not os.path.isdir(os.path.join(folder, n))])


def planted(tree, rel, line, expect, what):
    """Puts `line` after the first #include of tree/rel (or makes rel holding it), runs the check, restores
    the file; `expect` must be reported on rel at the planted line, with exit 1."""
    path = os.path.join(tree, rel)
    before = open(path).read() if os.path.exists(path) else None
    lines = before.splitlines(keepends=True) if before is not None else []
    at = next((i + 1 for i, l in enumerate(lines) if l.startswith("#include")), 0)
    lines.insert(at, line + "\n")
    with open(path, "w") as f:
        f.writelines(lines)
    try:
        r = run_script(SCRIPT, tree, timeout=60)
        want = f"{rel}:{at + 1}: {expect}"
        check(r.returncode == 1 and want in r.stdout and "check_layers: 1 include(s)" in r.stdout,
              f"{what}: '{want}' reported, exit 1 (exit {r.returncode}, {r.stdout.strip()!r})")
    finally:
        if before is None:
            os.remove(path)
        else:
            with open(path, "w") as f:
                f.write(before)


with tempfile.TemporaryDirectory() as tree:
    copy_tree(tree)
    r = run_script(SCRIPT, tree, timeout=60)
    check(r.returncode == 0 and "check_layers: ok" in r.stdout, f"the tree as it is passes ({r.stdout.strip()!r})")
    check(os.path.exists(os.path.join(tree, "examples", "generate.cpp")), "the copy holds the examples")

    private = 'includes the private header "core/io.h"; outside src/ only <xtrain/...> is seen'
    planted(tree, "examples/generate.cpp", '#include "core/io.h"', private, "an example including a private header")
    planted(tree, "examples/perplexity.cpp", "#include <core/io.h>", private, "the same in angle brackets")
    # a helper header beside an example is held to the same rule once an example includes it
    with open(os.path.join(tree, "examples", "train_callback.cpp")) as f:
        cb = f.read()
    with open(os.path.join(tree, "examples", "train_callback.cpp"), "w") as f:
        f.write('#include "helper.h"\n' + cb)
    planted(tree, "examples/helper.h", '#include "train/step.h"',
            'includes the private header "train/step.h"', "a helper header beside an example")
    with open(os.path.join(tree, "examples", "train_callback.cpp"), "w") as f:
        f.write(cb)
    planted(tree, "examples/generate.cpp", "#include <xtrain/core/nope.h>",
            "includes <xtrain/core/nope.h>, which does not exist", "a public header that does not exist")
    # a tool links xtrain_serve and xtrain_checkpoint: the trainer is above it
    planted(tree, "src/app/xtrain_generate.cpp", '#include "train/step.h"',
            'includes "train/step.h" of layer train, above program xtrain_generate', "a tool reaching above its links")
    planted(tree, "include/xtrain/core/error.h", '#include "core/io.h"',
            'the public header includes "core/io.h"', "a public header including a private one")
    r = run_script(SCRIPT, tree, timeout=60)
    check(r.returncode == 0, f"every planted include removed again: the copy passes ({r.stdout.strip()!r})")

sys.exit(1 if failures else 0)

#!/usr/bin/env python3
"""check_words.py: fails on words that mean nothing to a reader of the repository.

Two kinds, in every tracked text file (git ls-files): tracker numbers ("issue" or "ticket" followed by
a number, or a bare "#" and one or two digits), and words that describe where the work was done rather
than the project (how a machine was obtained or called, who else was busy on it, files outside the
repository). A comment names the behaviour or the reason instead; docs name the hardware ("two H200s
with NVLink", "a 2-core virtual machine") and what was measured when.
An upstream project's issue cited by URL (github.com/NVIDIA/nccl/issues/123) passes: only the bare
tracker style is matched, never a path. #include, #define, colours (#fff, #1f77b4), shell's $# and
${#x}, printf's %#x and HTML's &#39; do not match. This file is exempt: it spells out what it looks for.

Usage: scripts/check_words.py [REPO]   (exit 0: none found; 1: one line per hit, file:line: text (why))
"""
import os
import re
import subprocess
import sys

RULES = [
    (re.compile(r'\b(?:issues?|tickets?)\s*#?\d+', re.I),
     'a tracker number: name the behaviour or the reason instead'),
    (re.compile(r'(?<![\w$&%{#/])#\d{1,2}\b'),
     'a tracker number: name the behaviour or the reason instead'),
    (re.compile(r'\blent\b|\blend(?:s|ing)?\b', re.I),
     "the lab's word for getting a machine: say what was measured, and when"),
    (re.compile(r'nvidia-h200|\bmachine kinds?\b|\bkinds? of machines?\b|\b(?:one|two|four|eight|\d)-GPU kind\b'
                r'|\bdevice machine\b', re.I),
     "the lab's name for a machine: name the hardware (e.g. two H200s with NVLink)"),
    (re.compile(r'\bthe GPU machine\b|\b(?:development|dev|this) VM\b', re.I),
     "a name for where the work was done: name the hardware (e.g. one H200, a 2-core virtual machine)"),
    (re.compile(r'\bother engineers\b|\bengineers\W+(?:builds?|compil\w*|jobs?|tests?)\b|\bin the workspace\b', re.I),
     "who else used the machine: give the load (e.g. load average 10 on 2 cores) instead"),
    (re.compile(r'shared/(?:DEVICE|LAUNCHERS|DESIGN|CONVENTIONS|LAYERS|README)\.md'),
     "a file outside the repository: say the fact here, or cite a public source"),
]
SELF = 'scripts/check_words.py'


def main(repo):
    files = subprocess.run(['git', '-C', repo, 'ls-files', '-z'], check=True, capture_output=True,
                           text=True).stdout.split('\0')
    hits = 0
    for path in filter(None, files):
        full = os.path.join(repo, path)
        if path == SELF or not os.path.isfile(full):
            continue
        try:
            with open(full, encoding='utf-8') as f:
                lines = f.read().splitlines()
        except UnicodeDecodeError:
            continue  # not text
        for n, line in enumerate(lines, 1):
            for pattern, why in RULES:
                m = pattern.search(line)
                if m:
                    print(f'{path}:{n}: {line.strip()}  ({m.group(0)!r}: {why})')
                    hits += 1
                    break
    if hits:
        print(f'check_words: {hits} line(s) to reword', file=sys.stderr)
    return 1 if hits else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else '.'))

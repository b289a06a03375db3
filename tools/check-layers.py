#!/usr/bin/env python3
"""check-layers.py — libshoal's layers call only downwards.

    tools/check-layers.py SRC_DIR OBJECT_DIR...

The folders of SRC_DIR are the layers, bottom up: os, core, diag, api. A
file may include a header of its own folder or of a folder below, and the
object compiled from it may use a symbol defined by its own folder or by a
folder below. Inside core the files are ranked too (CORE_ORDER, the order
src/README.md draws): a core file uses only the files ranked before it.
Other folders' files may call each other.

Only os knows the platform: a file of another folder that names one
(_WIN32, __linux__, windows.h, ...) is a breach too. (A format, such as
__ELF__ for the diagnostics' ELF symbol reader, is not a platform.)

Includes are read from each .c and .h (`#include "folder/file.h"`); the
symbols each object defines and uses from `nm` on every .o under the
OBJECT_DIRs (named <folder>/<file>.c.o, as CMake builds them). Each breach
is one line on stderr; the exit status is 1 if there is any, 0 if none.
"""

import re
import subprocess
import sys
from pathlib import Path

LAYERS = ["os", "core", "diag", "api"]
CORE_ORDER = ["format", "lock", "options", "size_class", "arena", "large", "segment", "page", "pool", "depot", "heap",
              "alloc", "stats", "init"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/([^"]+)"')
PLATFORM = re.compile(r'\b(_WIN32|_WIN64|__linux__|__APPLE__|__FreeBSD__)\b|<(windows|winbase|unistd)\.h>')


def rank(folder, stem):
    """(layer index, rank inside the layer): lower may be used by higher."""
    layer = LAYERS.index(folder)
    inner = CORE_ORDER.index(stem) if folder == "core" and stem in CORE_ORDER else 0
    return layer, inner


def may_use(user, used):
    """Whether file `user` may use file `used`, each (folder, stem)."""
    if user == used:
        return True
    user_layer, user_inner = rank(*user)
    used_layer, used_inner = rank(*used)
    if used_layer != user_layer:
        return used_layer < user_layer
    if user[0] != "core":
        return True
    return used_inner < user_inner


def check_includes(src_dir):
    breaches = []
    for path in sorted(src_dir.glob("*/*.[ch]")):
        folder = path.parent.name
        if folder not in LAYERS:
            breaches.append(f"{path}: in no layer (a folder of {', '.join(LAYERS)})")
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            platform = PLATFORM.search(line)
            if platform is not None and folder != "os":
                breaches.append(f"{path}:{number}: names the platform ({platform.group(0)}); "
                                f"only os/ may")
            match = INCLUDE.match(line)
            if match is None:
                continue
            included = match.group(1)
            if included not in LAYERS:
                breaches.append(f"{path}:{number}: includes {included}/{match.group(2)}, in no layer")
            elif LAYERS.index(included) > LAYERS.index(folder):
                breaches.append(f"{path}:{number}: includes {included}/{match.group(2)}, "
                                f"a layer above {folder}")
    return breaches


def symbols_of(object_path):
    """(defined, used) global symbol names of one object."""
    listing = subprocess.run(["nm", str(object_path)], capture_output=True, text=True, check=True)
    defined, used = set(), set()
    for line in listing.stdout.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == "U":
            used.add(fields[1])
        elif len(fields) == 3 and fields[1].isupper() and fields[1] != "U":
            defined.add(fields[2])
    return defined, used


def check_calls(object_dirs):
    objects = {}
    for directory in object_dirs:
        for path in sorted(Path(directory).rglob("*.c.o")):
            folder, stem = path.parent.name, path.name[:-len(".c.o")]
            if folder in LAYERS:
                objects[(folder, stem)] = symbols_of(path)
    unranked = [f"core/{stem}.c is not in CORE_ORDER: give it its rank"
                for folder, stem in objects if folder == "core" and stem not in CORE_ORDER]
    if not objects:
        return [f"no objects (<layer>/<file>.c.o) under {', '.join(map(str, object_dirs))}"]
    owner = {}
    for file, (defined, _) in objects.items():
        for symbol in defined:
            owner[symbol] = file
    breaches = unranked
    for user, (_, used) in sorted(objects.items()):
        for symbol in sorted(used):
            target = owner.get(symbol)
            if target is not None and not may_use(user, target):
                breaches.append(f"{user[0]}/{user[1]}.c uses {symbol} of {target[0]}/{target[1]}.c, "
                                f"a layer above it")
    return breaches


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    breaches = check_includes(Path(argv[1])) + check_calls(argv[2:])
    for breach in breaches:
        print(f"check-layers: {breach}", file=sys.stderr)
    if not breaches:
        print("check-layers: every include and call goes down a layer")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

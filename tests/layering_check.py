#!/usr/bin/env python3
"""The floors of libweft include one way only (docs/ARCHITECTURE.md, "Layers").

Usage: layering_check.py SOURCE_ROOT

src/base/ (the ground floor) includes nothing of weft's but itself and the public headers;
src/device/ (what weft knows of CUDA) adds itself; transport/ adds src/device/ and itself; collectives/ adds src/device/, itself and the transport interface
(transport/transport.hpp), never a transport's own files; src/health/ (the monitor) the same,
with itself instead of collectives/. The roof (src/, tools/) may include
any floor. A quoted include that breaks this is printed with its file and line. Exits 0 when
every include keeps to its floor, 1 otherwise.
"""

import os
import re
import sys

# Floor -> the prefixes of weft's own headers it may include ("absl/" is Abseil's).
ALLOWED = {
    "src/base": ("src/base/", "weft/", "absl/"),
    "src/device": ("src/base/", "src/device/", "weft/", "absl/"),
    "transport": ("src/base/", "src/device/", "transport/", "weft/", "absl/"),
    "collectives": ("src/base/", "src/device/", "transport/transport.hpp", "collectives/", "weft/",
                    "absl/"),
    "src/health": ("src/base/", "transport/transport.hpp", "src/health/", "weft/", "absl/"),
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    broken, checked = [], 0
    for floor, allowed in ALLOWED.items():
        for folder, _, files in os.walk(os.path.join(root, floor)):
            for name in sorted(files):
                if not name.endswith((".cc", ".hpp", ".h", ".cu", ".cuh")):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        checked += 1
                        if not m.group(1).startswith(allowed):
                            broken.append(f"{os.path.relpath(path, root)}:{number}: {floor}/ "
                                          f"includes \"{m.group(1)}\", above its floor")
    for b in broken:
        print(b)
    print(f"{checked} includes checked")
    print(f"{0 if broken else 1} passed, {1 if broken else 0} failed")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())

#!/bin/sh
# libhal.so.1 exports exactly the public API and each backend library exactly its entry point
# (tools/check_symbols.py). Arguments: the checker, libhal.so.1, a public header (its directory
# is scanned), a library that is not a backend (the checker must refuse it: the check can fail),
# then the backend libraries.
set -eu
checker="$1" hal="$2" header="$3" not_a_backend="$4"
shift 4
headers=$(dirname "$header")
if python3 "$checker" --hal "$hal" --headers "$headers" --backend "$not_a_backend" >/dev/null 2>&1; then
    echo "FAIL: the checker accepted $not_a_backend as a backend library" >&2
    exit 1
fi
set -- $(for lib in "$@"; do printf -- '--backend %s ' "$lib"; done)
exec python3 "$checker" --hal "$hal" --headers "$headers" "$@"

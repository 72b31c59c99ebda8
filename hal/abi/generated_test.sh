#!/bin/sh
# The checked-in files generated from hal/abi/slots.toml are what the generator writes today
# (hal/abi/gen_abi.py --check, run in the test's runfiles, where the spec, the generator,
# .clang-format and the generated files sit at their repository paths).
set -eu
exec python3 "$1" --check

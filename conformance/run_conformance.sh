#!/bin/sh
# Runs the conformance suite: "$1" is the suite, the rest its arguments (--backend=...).
set -eu
exec "$@"

#!/bin/sh
# Runs the conformance suite on the Trainium backend over the libnrt emulator. The emulator's
# core locks go to a directory of this test's own, so that it never waits for the cores of a
# test running beside it.
set -eu
NEURON_EMU_LOCK_DIR="${TEST_TMPDIR:-$(mktemp -d)}/neuron-emu-locks"
export NEURON_EMU_LOCK_DIR
exec "$@"

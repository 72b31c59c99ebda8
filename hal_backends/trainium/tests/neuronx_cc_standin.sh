#!/bin/sh
# A stand-in for the Neuron compiler (neuronx-cc), which installs only with AWS's Neuron SDK, for
# the backend's tests of its command line, NEFF cache and failure reports. It "compiles" by
# copying the StableHLO module to the output, which the libnrt emulator then executes in place of
# a NEFF (emulator/README.md, "Programs"). It appends each command line to
# $NEURONX_CC_STANDIN_LOG, and refuses a module containing "standin: refuse".
if [ "$1" = "--version" ]; then
    echo "NeuronX Compiler version 2.99.0.0+standin"
    exit 0
fi
if [ -n "$NEURONX_CC_STANDIN_LOG" ]; then
    echo "$*" >>"$NEURONX_CC_STANDIN_LOG"
fi
if [ "$1" != compile ]; then
    echo "neuronx-cc stand-in: usage: compile MODULE ... --output NEFF" >&2
    exit 2
fi
module=$2
output=
while [ $# -gt 0 ]; do
    if [ "$1" = --output ]; then
        output=$2
    fi
    shift
done
if grep -q "standin: refuse" "$module"; then
    echo "ERROR 70: the stand-in refuses this module (it asked to be refused)"
    exit 70
fi
cp "$module" "$output"

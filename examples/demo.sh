#!/usr/bin/env bash
# The main job: train examples/train_tiny_lm.py with DDP on 2 ranks on the emulated Trainium
# device ("neuron": the Trainium backend over the libnrt emulator torch_hal bundles), then the
# same run on the CPU, and compare the per-step losses, step times and device memory.
#
#   examples/demo.sh                 # needs torch 2.13 and torch_hal installed (bridge/README.md)
#
# Environment:
#   DEMO_STEPS    training steps per run (default 40)
#   DEMO_OUT      output directory (default out/demo): neuron.json, cpu.json, loss_curves.png
#                 (drawn with matplotlib, which make demo installs)
#   DEMO_DEVICE   the device run's device (default neuron; "hal" runs the cpu backend instead)
#   DEMO_RTOL     accepted relative loss difference (default 1e-6)
#   DEMO_COMPILE  1 (default): also train with torch.compile, 1 process, on the cpu backend's
#                 "hal" device and on the CPU, and compare those losses; then on the emulated
#                 "neuron" device (graphs lowered to StableHLO programs, executed by the
#                 emulator with XLA's CPU compiler) against CPU compiled and CPU eager, with the
#                 share of graph nodes that ran as device programs; 0 leaves it out
#   DEMO_COMPILE_RTOL  accepted relative difference of the compiled runs (default 1e-3: the
#                 compiled graphs of a device that is not "cpu" differ from the CPU's in a few
#                 places, see bridge/README.md "torch.compile": not bit-exact)
#
# The Trainium backend loads the Neuron runtime from HAL_NEURON_LIBNRT, /opt/aws/neuron/lib or
# the loader path; on a machine without one it takes the emulator bundled next to it
# (torch_hal/lib/libnrt.so.1). Under torchrun each rank takes its own NeuronCore
# (NEURON_RT_VISIBLE_CORES=<local rank>, set by the backend). On the emulator the run is
# an emulated machine of its own (NEURON_EMU_INSTANCE_ID): its ranks exclude each other, and other
# jobs on this host never take its NeuronCores.
set -euo pipefail

if [ -z "${NEURON_EMU_INSTANCE_ID:-}" ] && [ -z "${NEURON_EMU_LOCK_DIR:-}" ]; then
    export NEURON_EMU_INSTANCE_ID="demo-$$"
    # The emulator's lock files of this machine (its default lock directory), gone with the run.
    trap 'rm -rf "${TMPDIR:-/tmp}/neuron-emu-$(id -u)/$NEURON_EMU_INSTANCE_ID"' EXIT
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
steps="${DEMO_STEPS:-40}"
out="${DEMO_OUT:-out/demo}"
device="${DEMO_DEVICE:-neuron}"
rtol="${DEMO_RTOL:-1e-6}"
compile="${DEMO_COMPILE:-1}"
compile_rtol="${DEMO_COMPILE_RTOL:-1e-3}"
python="${PYTHON:-python3}"
mkdir -p "$out"

case "$device" in
neuron) backend=trainium ;;
hal) backend=cpu ;;
*) echo "demo.sh: DEMO_DEVICE must be neuron or hal, not '$device'" >&2; exit 2 ;;
esac

# Both runs: the same threads (1 per rank, what torchrun would pick) and the same seeds.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
common=(--steps "$steps" --seed 1234 --print-every 1)

if ! TORCH_HAL_BACKEND="$backend" "$python" -c "
import sys, torch, torch_hal
if not torch_hal.is_loaded():
    sys.exit('torch_hal did not load the $backend backend: ' + str(torch_hal.load_error()))
print('torch', torch.__version__, '| torch_hal backend', torch_hal.backend_name(), '| device',
      torch_hal.device_type(), 'x', torch.accelerator.device_count(), '|',
      torch.get_device_module('$device').get_device_name(0))
"; then
    echo "demo.sh: install the bridge first: pip install --no-build-isolation ./bridge" >&2
    exit 1
fi

start=$SECONDS
echo
parts=3
[ "$compile" = 1 ] && parts=9
echo "== 1/$parts: $device, 2 ranks (DDP, torchrun), $steps steps"
TORCH_HAL_BACKEND="$backend" torchrun --standalone --nproc-per-node 2 \
    "$here/train_tiny_lm.py" --device "$device" "${common[@]}" --loss-log "$out/$device.json"

echo
echo "== 2/$parts: cpu, 2 ranks (DDP, torchrun), $steps steps"
env -u TORCH_HAL_BACKEND torchrun --standalone --nproc-per-node 2 \
    "$here/train_tiny_lm.py" --device cpu "${common[@]}" --loss-log "$out/cpu.json"

echo
echo "== 3/$parts: comparison (cpu vs $device)"
rc=0
"$python" "$here/compare_losses.py" "$out/cpu.json" "$out/$device.json" --rtol "$rtol" \
    --plot "$out/loss_curves.png" || rc=$?

crc=0
ncrc=0
if [ "$compile" = 1 ]; then
    echo
    echo "== 4/$parts: hal (cpu backend), torch.compile, 1 process, $steps steps"
    TORCH_HAL_BACKEND=cpu "$python" "$here/train_tiny_lm.py" --device hal --compile \
        "${common[@]}" --loss-log "$out/hal_compiled.json"
    echo
    echo "== 5/$parts: cpu, torch.compile, 1 process, $steps steps"
    env -u TORCH_HAL_BACKEND "$python" "$here/train_tiny_lm.py" --device cpu --compile \
        "${common[@]}" --loss-log "$out/cpu_compiled.json"
    echo
    echo "== 6/$parts: comparison (cpu compiled vs hal compiled)"
    "$python" "$here/compare_losses.py" "$out/cpu_compiled.json" "$out/hal_compiled.json" \
        --rtol "$compile_rtol" --plot "$out/loss_curves_compiled.png" || crc=$?
    echo
    echo "== 7/$parts: neuron (trainium backend), torch.compile (StableHLO), 1 process, $steps steps"
    TORCH_HAL_BACKEND=trainium "$python" "$here/train_tiny_lm.py" --device neuron --compile \
        "${common[@]}" --loss-log "$out/neuron_compiled.json"
    echo
    echo "== 8/$parts: cpu, eager, 1 process, $steps steps"
    env -u TORCH_HAL_BACKEND "$python" "$here/train_tiny_lm.py" --device cpu \
        "${common[@]}" --loss-log "$out/cpu_eager_1.json"
    echo
    echo "== 9/$parts: comparison (neuron compiled vs cpu compiled and cpu eager)"
    "$python" "$here/compare_compiled.py" "$out/cpu_eager_1.json" "$out/cpu_compiled.json" \
        "$out/neuron_compiled.json" || ncrc=$?
fi
echo
echo "demo: $((SECONDS - start)) s; logs and plots in $out/"
if [ "$rc" -eq 1 ]; then
    echo "demo: FAILED: the $device losses do not match the cpu losses (rtol $rtol)" >&2
elif [ "$rc" -ne 0 ]; then
    echo "demo: FAILED: compare_losses.py could not compare the runs or write the plot" >&2
fi
if [ "$crc" -eq 1 ]; then
    echo "demo: FAILED: the compiled hal losses do not match the compiled cpu losses (rtol $compile_rtol)" >&2
elif [ "$crc" -ne 0 ]; then
    echo "demo: FAILED: compare_losses.py could not compare the compiled runs" >&2
fi
if [ "$ncrc" -eq 1 ]; then
    echo "demo: FAILED: the compiled neuron losses deviate from cpu eager by more than twice cpu Inductor's own deviation" >&2
elif [ "$ncrc" -ne 0 ]; then
    echo "demo: FAILED: compare_compiled.py could not compare the compiled neuron run" >&2
fi
[ "$rc" -ne 0 ] && exit "$rc"
[ "$crc" -ne 0 ] && exit "$crc"
exit "$ncrc"

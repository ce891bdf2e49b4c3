#!/usr/bin/env bash
# The device-neutral rule, checked over the sources: core/layers and core/model never read or
# write tensor memory on the host and never wait for the device. Every numeric step is a kernel
# (kernels/) enqueued on the layer's Context; results reach the host once per step through the
# trainer's read back (core/train). A line that must touch host values (never device data) says
# why with a trailing `// host-ok: <reason>` marker.
#
# Usage: device_neutral_check.sh [ROOT]   (default: the repository root). Exit 1 lists each
# violation as file:line: pattern: text.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
dirs=("$root/core/layers" "$root/core/model")
# Host access to tensor memory, host-side allocation and copies, and waits.
patterns=(
  '\.data<' '->data<' '\.raw\(\)' '->raw\(\)' 'to_vector<' 'convert_into\('
  'Tensor::empty\(' 'Tensor::try_empty\(' 'Tensor::zeros\(' 'Tensor::copy_of\(' 'Tensor::from_vector'
  'memcpy' 'memset' 'memmove' 'std::copy' 'std::fill'
  '\.zero\(\)' 'copy_from\(' 'device_memcpy' 'device_memset'
  'read_back\(' 'synchronize\(' 'stream_synchronize' 'cudaDeviceSynchronize' 'cudaStreamSynchronize'
  'DeviceAccessScope'
)
status=0
for dir in "${dirs[@]}"; do
  [ -d "$dir" ] || { echo "device_neutral_check: no directory $dir" >&2; exit 2; }
done
for p in "${patterns[@]}"; do
  # -E regex; skip comment-only lines and lines marked host-ok.
  while IFS= read -r hit; do
    [ -z "$hit" ] && continue
    text=${hit#*:*:}
    case "$text" in
      *"host-ok:"*) continue ;;
    esac
    trimmed=$(echo "$text" | sed 's/^[[:space:]]*//')
    case "$trimmed" in
      //*) continue ;;
    esac
    echo "${hit%%:*}:$(echo "$hit" | cut -d: -f2): '$p': $trimmed"
    status=1
  done < <(grep -rnE --include='*.cc' --include='*.h' -- "$p" "${dirs[@]}" || true)
done
if [ $status -ne 0 ]; then
  echo "device_neutral_check: core/layers and core/model must not touch tensor memory on the host" \
       "or wait (use a kernel; the trainer reads results back once per step)" >&2
fi
exit $status

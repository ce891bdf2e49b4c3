#!/usr/bin/env bash
# Installs the Debian packages momoe needs to build and test on the CPU, if any are missing.
# CUDA (nvcc, cuBLAS, NCCL) is optional and is not installed here.
# Usage: scripts/install_deps.sh [build|test|all] (default all): `build` what configuring and
# compiling need, `test` what only the tests and tools run (tests/run.sh installs these while
# the build compiles).
set -euo pipefail
[ "${MOE_SKIP_INSTALL:-0}" = "1" ] && exit 0

# ninja-build: the generator scripts/build.sh prefers.
build=(cmake g++ make ninja-build libprotobuf-dev protobuf-compiler libopenmpi-dev openmpi-bin
       libgtest-dev libbenchmark-dev nlohmann-json3-dev libzstd-dev libsentencepiece-dev)
# The BLAS is loaded at run time (kernels/cpu/blas_library.h): OpenBLAS's runtime library,
# and BLIS for the tests that run the products through it. python3-venv: tensorboard_test installs
# its pinned TensorBoard from PyPI into a virtual environment under the build tree. iproute2:
# multihost_test makes two hosts of network namespaces (ip netns, a veth pair).
test=(libopenblas0-pthread libblis4-serial zstd python3-matplotlib python3-protobuf python3-numpy
      python3-torch python3-pytest python3-venv shellcheck clang-format iproute2)
case ${1:-all} in
  build) packages=("${build[@]}") ;;
  test) packages=("${test[@]}") ;;
  all) packages=("${build[@]}" "${test[@]}") ;;
  *) echo "usage: scripts/install_deps.sh [build|test|all]" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"

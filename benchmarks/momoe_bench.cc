// momoe-bench: benchmarks that print JSON lines (the first line describes the environment). A
// benchmark checks its flags before it prints anything: an unknown benchmark or flag (with the
// closest names), or a bad value, is its only output, with exit 2; a failed run exits 1
// (launcher/exit_status.h).
//   momoe-bench layer     [--tokens T --d D --f F --experts E --top-k K --variant V]
//                         the MoE layer forward + backward against a dense GEMM floor (CPU)
//   momoe-bench attention [--batch B --heads H --seq S --head-dim Dh --dtype bf16|f32]
//                         the causal attention core forward and backward by the path the device
//                         takes (CPU, or a GPU's GEMM or fused kernels), against its GEMM rate
//   momoe-bench train     [--preset quickstart|smoe-medium|gpu-large|all] ...    training
//                         throughput, model FLOP/s, MFU on a GPU
//   momoe-bench memory    [--preset smoe-medium] ...   memory and step time per recompute setting
//                         (and the distributed optimizer under mpirun) against the baseline
//   momoe-bench alltoall  ...    (under mpirun)  MoE exchange vs a plain MPI_Alltoall, same bytes
//   momoe-bench scaling   ...    (under mpirun)  one weak/strong scaling point
//   momoe-bench data      [--mb 64 --corpus-gb G]   tokenization, loader vs step, peak memory
//   momoe-bench sgemm     [--rows 256]   the BLAS kernel's accuracy and rate on momoe's shapes
//   momoe-bench blas-fingerprint   the BLAS kernel's arithmetic as one number (the bits of a
//                         sweep of products): kernels with equal numbers compute alike
//   momoe-bench env       the environment line alone (CPU, BLAS library and kernel); exit 2 when
//                         the BLAS cannot be loaded as configured (tests/run.sh asks it which
//                         OpenBLAS kernels this CPU runs)
// moe_layer_bench (Google Benchmark) sweeps the CPU layer over shapes and variants.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/did_you_mean.h"
#include "base/logging.h"
#include "benchmarks/bench_util.h"
#include "comm/world.h"
#include "kernels/cpu/blas_library.h"
#include "launcher/exit_status.h"
#include "launcher/momoe_data_process.h"

// Each checks its flags and returns its run (bench_util.h BenchRun).
namespace moe::bench {
StatusOr<BenchRun> bench_layer(int argc, char** argv, comm::World* world);
StatusOr<BenchRun> bench_attention(int argc, char** argv, comm::World* world);
StatusOr<BenchRun> bench_train(int argc, char** argv, comm::World* world);
StatusOr<BenchRun> bench_alltoall(int argc, char** argv, comm::World* world);
StatusOr<BenchRun> bench_scaling(int argc, char** argv, comm::World* world);
StatusOr<BenchRun> bench_data(int argc, char** argv, comm::World* world);
StatusOr<BenchRun> bench_sgemm(int argc, char** argv, comm::World* world);
StatusOr<BenchRun> bench_blas_fingerprint(int argc, char** argv, comm::World* world);
StatusOr<BenchRun> bench_memory(int argc, char** argv, comm::World* world);
}  // namespace moe::bench

namespace {

using CheckBench = moe::StatusOr<moe::bench::BenchRun> (*)(int, char**, moe::comm::World*);

#if !defined(MOE_BENCH_WITH_MPI)
moe::StatusOr<moe::bench::BenchRun> alltoall_without_mpi(int, char**, moe::comm::World*) {
  return moe::unimplemented_error("momoe-bench alltoall needs the MPI backend (built without MPI)");
}
#endif

// The subcommands that measure (env aside), in the usage's order.
struct Subcommand {
  const char* name;
  CheckBench check;
};
#if defined(MOE_BENCH_WITH_MPI)
constexpr CheckBench kAlltoall = moe::bench::bench_alltoall;
#else
constexpr CheckBench kAlltoall = alltoall_without_mpi;
#endif
const Subcommand kSubcommands[] = {{"layer", moe::bench::bench_layer},
                                   {"attention", moe::bench::bench_attention},
                                   {"train", moe::bench::bench_train},
                                   {"memory", moe::bench::bench_memory},
                                   {"alltoall", kAlltoall},
                                   {"scaling", moe::bench::bench_scaling},
                                   {"data", moe::bench::bench_data},
                                   {"sgemm", moe::bench::bench_sgemm},
                                   {"blas-fingerprint", moe::bench::bench_blas_fingerprint}};

// The subcommand named `cmd` ("env" included: a null check), or an error naming the closest.
moe::StatusOr<CheckBench> find_subcommand(const std::string& cmd) {
  std::vector<std::string> names;
  for (const Subcommand& s : kSubcommands) {
    if (cmd == s.name) return s.check;
    names.push_back(s.name);
  }
  if (cmd == "env") return CheckBench{nullptr};
  names.push_back("env");
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  return moe::invalid_argument_error("unknown benchmark '", cmd, "'", moe::did_you_mean(cmd, names),
                                     ": momoe-bench runs ", list, " (momoe-bench --help)");
}

// One example command line per subcommand (its --help ends with it).
const char* example_of(const std::string& cmd) {
  if (cmd == "layer") return "momoe-bench layer --tokens 4096 --experts 16 --variant momentum";
  if (cmd == "train") return "momoe-bench train --preset smoe-medium --steps 3";
  if (cmd == "attention") {
    return "MOMOE_ATTENTION=fused momoe-bench attention --device cuda --batch 16 --seq 1024";
  }
  if (cmd == "alltoall") return "mpirun -np 2 momoe-bench alltoall --tokens 4096,16384";
  if (cmd == "scaling") return "mpirun -np 4 momoe-bench scaling --what train --mode strong";
  if (cmd == "data") return "momoe-bench data --mb 64 --corpus-gb 4";
  if (cmd == "sgemm") return "OPENBLAS_CORETYPE=Haswell momoe-bench sgemm --rows 256";
  if (cmd == "memory") return "mpirun -np 4 momoe-bench memory --preset smoe-medium --steps 3";
  if (cmd == "blas-fingerprint") return "OPENBLAS_CORETYPE=Zen momoe-bench blas-fingerprint";
  return "momoe-bench env";
}

// `momoe-bench SUBCOMMAND --help`: each subcommand's options with their defaults.
const char* usage_of(const std::string& cmd) {
  if (cmd == "layer") {
    return "momoe-bench layer: the MoE layer forward + backward against a dense GEMM floor\n"
           "  --tokens 2048  --d 352  --f 352  --experts 16  --top-k 2\n"
           "  --variant plain|momentum|adam|robust|ac|sparsemixer (plain)\n"
           "  --iterations 5  --warmup 1\n"
           "  --threads 0 (CPU threads; 0 = every core)  --device cpu|cuda (cpu)\n"
           "  --dtype f32|bf16  --dropless 0|1  --activation relu|gelu|swiglu (relu)\n"
           "  --score softmax|sigmoid (softmax)  --shared 0  --shared-gate 0|1 (0)\n"
           "  --bias-rate 0  --groups 1  --topk-groups 0\n"
           "  --compare fine-grained|options|variants (the fine-grained layer against the coarse\n"
           "  one; loss-free balancing and shared experts, gated or not, against the layer alone;\n"
           "  the papers' variants against the plain layer)  --rounds 5\n"
           "  --forward-alone 0|1 (1: also time the forward alone: fwd_ms, bwd_ms)\n";
  }
  if (cmd == "train") {
    return "momoe-bench train: training throughput (tokens/s) and model FLOP/s (on a GPU the MFU\n"
           "against its measured GEMM rate) of the quick-start and an SMoE-medium-shaped model,\n"
           "or of gpu-large (a model that fills one GPU; named alone)\n"
           "  --preset quickstart|smoe-medium|gpu-large|all (all)\n"
           "  --config FILE (configs/quickstart.pbtxt)\n"
           "  --steps 5  --warmup 1  --threads 0 (per rank; 0 = its share of the cores)\n"
           "  --device cpu|cuda (cpu)  --precision FP32|BF16 (the config's)\n"
           "  --cuda-graphs 0|1 (train.cuda_graphs; default: the config's, on by default;\n"
           "  the timed steps are replays: graph_replays)\n";
  }
  if (cmd == "attention") {
    return "momoe-bench attention: the causal attention core forward and backward by the path\n"
           "the device takes (a GPU in bf16: its fused kernels by default, its cuBLAS path on\n"
           "bf16 operands with MOMOE_ATTENTION=gemm-bf16, in f32 with =gemm, which f32 always\n"
           "takes), in causal TFLOP/s beside the GEMM rate of the same run\n"
           "  --batch 4  --heads 8  --seq 512  --head-dim 64  --dtype bf16|f32 (bf16)\n"
           "  --device cpu|cuda (cpu)  --iterations 10  --warmup 2  --threads 0\n";
  }
  if (cmd == "alltoall") {
    return "momoe-bench alltoall (under mpirun): the MoE exchange against a plain all-to-all of\n"
           "the same bytes\n"
           "  --tokens 4096,16384 (per rank, a list)  --d 512  --experts 16  --top-k 2\n"
           "  --capacity-factor 1.25  --iterations 20  --warmup 3\n";
  }
  if (cmd == "scaling") {
    return "momoe-bench scaling (under mpirun -np R): one weak or strong scaling point\n"
           "  --what layer|train (layer)  --mode weak|strong (weak)\n"
           "  layer: --tokens 2048 (per rank, weak)  --d 256  --f 512  --experts 16  --top-k 2\n"
           "         --iterations 10  --warmup 2\n"
           "  train: --sequences 4 (per rank, weak)  --iterations 3  --warmup 1\n";
  }
  if (cmd == "data") {
    return "momoe-bench data: tokenization MB/s per thread count (momoe-data prepare of the "
           "bundled\n"
           "text repeated), the loader's tokens/s against a training step's, and with --corpus-gb\n"
           "the peak resident memory of momoe-train on a generated dataset of that size\n"
           "  --mb 64 (generated text)  --threads 1,2,..,cores (a list)  --loader-seconds 2\n"
           "  --train-steps 2  --corpus-gb 0 (0: skip the memory run)  --rss-steps 20\n";
  }
  if (cmd == "sgemm") {
    return "momoe-bench sgemm: the loaded BLAS kernel's sgemm on momoe's GEMM shapes: the worst\n"
           "error against an exact product in units of u sum|a||b| beside its derived bound, and\n"
           "the single-threaded GFLOP/s (exit 1 when a shape exceeds the bound)\n"
           "  --rows 256 (rows of the large products)  --seconds-ms 200 (timing per shape; 0: "
           "none)\n";
  }
  if (cmd == "memory") {
    return "momoe-bench memory: each training setting's memory (persistent tensors, the step's\n"
           "allocator and resident peaks, the start-up estimate) and step time against the\n"
           "first setting's; under mpirun -np R the distributed optimizer at DP R as well\n"
           "  --preset smoe-medium|quickstart (smoe-medium)  --steps 3  --warmup 1  --threads 0\n"
           "  --settings none,selective,full (alone; under mpirun also zero1)\n"
           "  --loss-chunk 0 (train.loss_chunk_tokens for every setting; 0: the whole batch)\n";
  }
  if (cmd == "blas-fingerprint") {
    return "momoe-bench blas-fingerprint: the loaded BLAS kernel's arithmetic as one number, a\n"
           "hash of the bits of a fixed sweep of sgemm and dgemm products\n"
           "(kernels/cpu/blas_fingerprint.h): two kernels with the same number computed every\n"
           "product alike (no options)\n";
  }
  if (cmd == "env") return "momoe-bench env: the environment line alone (CPU, BLAS, build)\n";
  return nullptr;
}

int run(int argc, char** argv) {
  using namespace moe;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      if (const char* usage = usage_of(argv[1])) {
        std::printf("%sexample: %s\n", usage, example_of(argv[1]));
        return 0;
      }
    }
  }
  const bool help =
      argc >= 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0);
  if (argc < 2 || help) {
    std::fprintf(argc < 2 ? stderr : stdout,
                 "usage: momoe-bench layer|attention|train|memory|alltoall|scaling|data|sgemm|"
                 "blas-fingerprint|env "
                 "[--key value ...]\n"
                 "  (momoe-bench SUBCOMMAND --help: its options and defaults)\n"
                 "example: momoe-bench train --preset quickstart --steps 5\n");
    return argc < 2 ? 2 : 0;
  }
  // A mistyped benchmark is refused before anything loads or prints.
  const std::string cmd = argv[1];
  StatusOr<CheckBench> check = find_subcommand(cmd);
  if (!check.ok()) return exit_with(check.status());
  // The BLAS first, before MPI starts threads (it is loaded with its kernel chosen: see
  // blas_library.h); a kernel this CPU cannot run is refused here, by name.
  if (Status blas = kernels::ref::load_blas(); !blas.ok()) {
    log_error(blas.to_string());
    return 2;
  }
  if (*check == nullptr) {  // env
    std::printf("%s\n", bench::environment_line(1).c_str());
    kernels::ref::print_blas_warning(0);
    return 0;
  }
  // GPU runs (--device cuda) let the world pick NCCL where every rank has its own GPU.
  DeviceKind device = DeviceKind::kCpu;
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && std::strcmp(argv[i + 1], "cuda") == 0) {
      device = DeviceKind::kCuda;
    }
  }
  StatusOr<comm::World> world = comm::make_world(&argc, &argv, CommBackend::kAuto, 600, device);
  if (!world.ok()) return exit_with(world.status());
  set_log_rank(world->rank());
  // Its flags checked before anything is printed: bad input is the only line (every rank finds
  // it alike; rank 0 prints it).
  StatusOr<bench::BenchRun> checked = (*check)(argc - 2, argv + 2, &*world);
  if (!checked.ok()) {
    const Status s = checked.status().with_context("momoe-bench " + cmd);
    return exit_code_of(s) == kExitUserError ? exit_with_job_wide(s)
                                             : exit_with(s, world->comm.get());
  }
  if (world->rank() == 0) std::printf("%s\n", bench::environment_line(world->size()).c_str());
  kernels::ref::print_blas_warning(world->rank());
  if (Status s = (*checked)(); !s.ok()) return exit_with(s, world->comm.get());
  return 0;
}

}  // namespace

// Nothing is thrown past main: an exception from a library becomes one error line and exit 1.
int main(int argc, char** argv) {
  try {
    // A SentencePiece corpus (train and scaling presets) is prepared by momoe-data.
    moe::data::use_momoe_data_for_sentencepiece();
    return run(argc, argv);
  } catch (const std::exception& e) {
    moe::log_error(std::string("momoe-bench: ") + e.what());
    return 1;
  }
}

#include "base/phase_timer.h"

#include <algorithm>

#include "base/check.h"
#include "base/context.h"

#if defined(MOE_WITH_CUDA)
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#endif

namespace moe {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kData:
      return "data";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kExchange:
      return "exchange";
    case Phase::kGradSync:
      return "grad_sync";
    case Phase::kOptimizer:
      return "optimizer";
  }
  return "?";
}

namespace {

#if defined(MOE_WITH_CUDA)
const char* nvtx_name(Phase p) {
  switch (p) {
    case Phase::kData:
      return "momoe:data";
    case Phase::kForward:
      return "momoe:forward";
    case Phase::kBackward:
      return "momoe:backward";
    case Phase::kExchange:
      return "momoe:exchange";
    case Phase::kGradSync:
      return "momoe:grad_sync";
    case Phase::kOptimizer:
      return "momoe:optimizer";
  }
  return "momoe:?";
}
#endif

}  // namespace

struct PhaseTimer::Mark {
  std::chrono::steady_clock::time_point host;
  void* event = nullptr;  // cudaEvent_t on a CUDA context
};

PhaseTimer::PhaseTimer(Context* ctx) : ctx_(ctx) { open_.fill(-1); }

PhaseTimer::~PhaseTimer() {
  for (Mark* m : marks_) {
#if defined(MOE_WITH_CUDA)
    if (m->event != nullptr) {
      CudaDeviceGuard on_device(ctx_->device());
      cudaEventDestroy(static_cast<cudaEvent_t>(m->event));
    }
#endif
    delete m;
  }
}

int PhaseTimer::record() {
  int index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    index = static_cast<int>(marks_.size());
    marks_.push_back(new Mark);
  }
  Mark* m = marks_[index];
  m->host = std::chrono::steady_clock::now();
#if defined(MOE_WITH_CUDA)
  if (ctx_->device().is_cuda()) {
    CudaDeviceGuard on_device(ctx_->device());
    Status s;
    if (m->event == nullptr) {
      cudaEvent_t e = nullptr;
      s = MOE_CUDA_STATUS(cudaEventCreate(&e));
      m->event = e;
    }
    if (s.ok()) {
      s = MOE_CUDA_STATUS(cudaEventRecord(static_cast<cudaEvent_t>(m->event),
                                          static_cast<cudaStream_t>(ctx_->stream().handle)));
    }
    if (!s.ok()) {
      (void)cudaGetLastError();  // not the next kernel's launch error
      if (error_.ok()) error_ = s.with_context("timing the step's phases");
    }
  }
#endif
  return index;
}

void PhaseTimer::begin(Phase p) {
  const int i = static_cast<int>(p);
  MOE_CHECK(open_[i] < 0, "phase ", phase_name(p), " begun twice");
#if defined(MOE_WITH_CUDA)
  nvtxRangePushA(nvtx_name(p));
#endif
  open_[i] = record();
}

void PhaseTimer::end(Phase p) {
  const int i = static_cast<int>(p);
  MOE_CHECK(open_[i] >= 0, "phase ", phase_name(p), " ended without a begin");
  pending_.push_back({p, open_[i], record()});
  open_[i] = -1;
#if defined(MOE_WITH_CUDA)
  nvtxRangePop();
#endif
}

void PhaseTimer::add_host_seconds(Phase p, double seconds) {
  host_[static_cast<int>(p)] += seconds;
}

void PhaseTimer::release_marks() {
  std::vector<bool> used(marks_.size(), false);
  for (const Interval& iv : pending_) used[iv.begin_mark] = used[iv.end_mark] = true;
  for (int m : open_) {
    if (m >= 0) used[m] = true;
  }
  for (int m : free_) used[m] = true;  // already free
  for (size_t m = 0; m < used.size(); ++m) {
    if (!used[m]) free_.push_back(static_cast<int>(m));
  }
}

StatusOr<PhaseSecondsArray> PhaseTimer::collect() {
  PhaseSecondsArray out = host_;
  host_.fill(0.0);
  std::vector<Interval> later;
  for (const Interval& iv : pending_) {
    const Mark& a = *marks_[iv.begin_mark];
    const Mark& b = *marks_[iv.end_mark];
    double seconds = std::chrono::duration<double>(b.host - a.host).count();
#if defined(MOE_WITH_CUDA)
    if (a.event != nullptr && b.event != nullptr) {
      CudaDeviceGuard on_device(ctx_->device());
      const cudaError_t ready = cudaEventQuery(static_cast<cudaEvent_t>(b.event));
      if (ready == cudaErrorNotReady) {
        // The stream has not got there yet: a later collect() reads it. (NotReady is no error;
        // cleared anyway, so that no launch check reads it.)
        if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
        later.push_back(iv);
        continue;
      }
      float ms = 0;
      const Status s = MOE_CUDA_STATUS(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(a.event),
                                                            static_cast<cudaEvent_t>(b.event)));
      if (!s.ok()) {
        (void)cudaGetLastError();
        if (error_.ok()) error_ = s.with_context("timing the step's phases");
      }
      seconds = static_cast<double>(ms) * 1e-3;
    }
#endif
    out[static_cast<int>(iv.phase)] += seconds;
  }
  pending_ = std::move(later);
  release_marks();
  if (!error_.ok()) {
    Status e = error_;
    error_ = Status::OK();
    return e;
  }
  return out;
}

ScopedPhase::ScopedPhase(Context& ctx, Phase p) : timer_(ctx.phase_timer()), phase_(p) {
  if (timer_ != nullptr) timer_->begin(phase_);
}

ScopedPhase::~ScopedPhase() {
  if (timer_ != nullptr) timer_->end(phase_);
}

}  // namespace moe

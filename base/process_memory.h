// This process's resident memory on the host, from Linux's /proc/self: what the kernel counts
// against the machine (and against an out-of-memory kill), beside the allocators' own counts of
// the tensors they hand out (base/allocator.h).
//
// The resident high-water mark (VmHWM) is the process's peak since it started, not since any
// step began. Linux (since 4.0) lowers it to the resident size now when a process writes "5" to
// its own /proc/self/clear_refs, without privileges; where that write fails (no /proc, another
// kernel, a sandbox that refuses it) the mark keeps running from the process's start. Either
// way it is the whole process's: every rank of a process whose ranks are threads, and every
// thread's memory.
#pragma once

#include <cstdint>

namespace moe {

// VmHWM of /proc/self/status in bytes (the peak resident set since the process started, or
// since the last successful reset_resident_peak()); -1 where it cannot be read.
int64_t resident_peak_bytes();

// Lowers the process's resident high-water mark to its resident size now (writes "5" to
// /proc/self/clear_refs). False where the kernel refuses, and the mark goes on from the
// process's start. Process-wide: it resets the mark for every thread of the process.
bool reset_resident_peak();

}  // namespace moe

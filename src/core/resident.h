// The process's resident memory as the kernel counts it (/proc/self/status VmRSS and VmHWM), reported
// beside the accountant's figures: what the accountant does not see (libraries, the allocator's
// slack, the CUDA runtime) shows up here.
#pragma once
#include <cstdint>

namespace oomb {

struct ResidentMemory {
  int64_t current = 0, peak = 0;  // bytes; 0 where /proc is not readable
};
ResidentMemory resident_memory();

// /proc/meminfo's MemAvailable in bytes (memory the kernel can give without swapping); 0 when unknown.
int64_t available_host_memory();

}  // namespace oomb

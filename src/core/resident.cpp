#include "core/resident.h"

#include <cstdio>
#include <cstring>

namespace oomb {

// The value in kB of the line starting with `key` in a /proc file, in bytes; 0 when absent.
static int64_t proc_kb(const char* file, const char* key) {
  std::FILE* f = std::fopen(file, "re");
  if (!f) return 0;
  char line[256];
  int64_t v = 0;
  const size_t k = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, k) != 0) continue;
    long long kb = 0;
    if (std::sscanf(line + k, " %lld", &kb) == 1) v = int64_t(kb) * 1024;
    break;
  }
  std::fclose(f);
  return v;
}

ResidentMemory resident_memory() {
  return {proc_kb("/proc/self/status", "VmRSS:"), proc_kb("/proc/self/status", "VmHWM:")};
}

int64_t available_host_memory() { return proc_kb("/proc/meminfo", "MemAvailable:"); }

}  // namespace oomb

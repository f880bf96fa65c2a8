// available_host_memory_bytes: how much host memory a process can still take, for checks made
// before a large allocation or read (a model directory's weights), so that an impossible size is one
// line naming it rather than std::bad_alloc or minutes of reading.
#pragma once

#include <cstddef>

namespace xtrain {

// available_host_memory_bytes: MemAvailable of /proc/meminfo (the kernel's estimate of memory
// available without swapping, proc(5)), or sysconf(_SC_AVPHYS_PAGES) x page size where that file is
// absent; 0 when neither is known (then callers skip their check).
size_t available_host_memory_bytes();

}  // namespace xtrain

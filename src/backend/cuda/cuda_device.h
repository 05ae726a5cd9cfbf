// CUDA device helpers usable from host code (no CUDA headers needed by includers).
#pragma once
#include <cstddef>
#include <string>

namespace oomb::cuda {
bool device_available(std::string* why);  // false with the reason when no GPU can be used
void install_device_allocator();          // Buffer(Tier::Device, ...) allocates with cudaMalloc
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
}  // namespace oomb::cuda

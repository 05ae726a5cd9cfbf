// CUDA device helpers usable from host code (no CUDA headers needed by includers).
#pragma once
#include <cstddef>
#include <string>

namespace oomb::cuda {
bool device_available(std::string* why);  // false with the reason when no GPU can be used
int device_count();                       // GPUs visible (0 when none or no driver)
void use_device(int index);               // this process's GPU from now on (before any other CUDA call)
void install_device_allocator();          // Buffer(Tier::Device, ...) allocates with cudaMalloc
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
// The device's name, and its dense bf16 peak in FLOP/s from the vendor's figures for the GPUs
// oomb targets (0 when the name is not one of them).
std::string device_name();
size_t free_memory();  // cudaMemGetInfo's free bytes (0 when it fails)
double peak_bf16_flops(const std::string& name);
}  // namespace oomb::cuda

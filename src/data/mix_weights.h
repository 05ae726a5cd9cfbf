// --data-weights W1,W2,...: a mix's weights (data/mixed_tokens.h) read exactly, as whole numbers in
// their ratio and in lowest terms (0.6,0.2 -> 3,1; 1.5,0.25 -> 6,1), so that any way of writing a
// ratio is the same mix. Each weight: digits, an optional fraction, an optional exponent, at most
// 15 significant digits; the weights together within 15 digits of each other.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace oomb {

constexpr int64_t kMaxDataWeight = 1'000'000'000'000'000;  // 10^15 (a mix adds at most 1024)

// `sources` decimal numbers > 0, comma-separated (spaces around them allowed); an error names the
// flag and the value.
std::vector<int64_t> parse_data_weights(const std::string& s, size_t sources);

// Whole numbers > 0 in the same ratio, divided by their greatest common divisor.
std::vector<int64_t> lowest_terms(std::vector<int64_t> w);

}  // namespace oomb

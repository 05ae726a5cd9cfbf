// Choosing the next token from logits: greedy (temperature 0: the argmax, the lowest index on a
// tie), or a draw from softmax(logits / temperature) restricted to the smallest set of most likely
// tokens whose probabilities sum to at least top_p (nucleus sampling), from a seeded generator.
#pragma once
#include <cstdint>
#include <random>

namespace oomb {

struct SampleOptions {
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;        // (0, 1]
};

int32_t sample_next(const float* logits, int64_t V, const SampleOptions& o, std::mt19937_64& rng);

}  // namespace oomb

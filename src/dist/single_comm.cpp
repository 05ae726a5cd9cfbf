#include <cstring>

#include "dist/comm.h"

namespace oomb {

namespace {
class SingleComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_to_all(const void* send, void* recv, size_t bytes) override { copy(recv, send, bytes); }
  void all_gather(const void* send, void* recv, size_t bytes) override { copy(recv, send, bytes); }
  void all_reduce_sum(float*, size_t) override {}
  void all_reduce_sum(double*, size_t) override {}
  void all_reduce_max(double*, size_t) override {}
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override { copy(recv, send, n * 4); }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  std::unique_ptr<Comm> split(int, int) override { return std::make_unique<SingleComm>(); }
  std::string name() const override { return "single"; }

 private:
  static void copy(void* d, const void* s, size_t n) {
    if (d != s && n) std::memmove(d, s, n);
  }
};
}  // namespace

std::unique_ptr<Comm> make_single_comm() { return std::make_unique<SingleComm>(); }

}  // namespace oomb

#include <stdexcept>
#include <vector>
#include <cstdio>
int main() {
  std::vector<int> shard(4);
  for (int step = 0; step < 8; ++step) {
    std::printf("step %d\n", step);
    std::fflush(stdout);
    if (step == 3) throw std::runtime_error("shard index 7 out of range for 4 shards");
  }
}

#include <glog/logging.h>

int main(int argc, char** argv) {
  FLAGS_logtostderr = 1;
  google::InitGoogleLogging(argv[0]);
  int world_size = 2;
  for (int step = 0; step < 3; ++step) {
    LOG(INFO) << "step " << step;
  }
  LOG(WARNING) << "falling back to gloo";
  int rank = 3;
  CHECK_LT(rank, world_size) << "rank out of range";
  return 0;
}

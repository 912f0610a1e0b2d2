#pragma once
// FileSizeLimit: makes a write fail part-way, as on a full disk, to test that
// a failed save leaves the previous file or directory as it was.

#include <sys/resource.h>

#include <doctest/doctest.h>

#include <csignal>

namespace xtgrad::testing {

// While alive, no file this process writes can grow past `bytes`: a write
// beyond fails with EFBIG, as on a full disk (SIGXFSZ, which would end the
// process, is ignored meanwhile). Keep the scope to the one call under test.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &previous_) == 0);
    handler_ = std::signal(SIGXFSZ, SIG_IGN);
    ::rlimit limit = previous_;
    limit.rlim_cur = bytes;
    set_ = ::setrlimit(RLIMIT_FSIZE, &limit) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &previous_);
    std::signal(SIGXFSZ, handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  bool set() const { return set_; }

 private:
  ::rlimit previous_{};
  void (*handler_)(int) = SIG_DFL;
  bool set_ = false;
};

}  // namespace xtgrad::testing

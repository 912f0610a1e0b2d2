#include "files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <random>
#include <system_error>

#include "../engine/errors.hpp"

namespace xtgrad::detail {

namespace {

namespace fs = std::filesystem;

// Flags of every open for reading: O_NONBLOCK so that opening a FIFO that
// slipped past the type check cannot wait for a writer (it has no effect on
// regular files), O_NOCTTY so that a terminal never becomes ours.
constexpr int k_read_flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
// Longer symbolic link targets are not plain file names anyway.
constexpr std::size_t k_max_link_target = 4096;

[[noreturn]] void fail_not_regular(const std::string& function, const std::string& context,
                                   const fs::path& path, mode_t mode) {
  fail_io(function, context + "cannot read " + path_str(path) + ": Is " + file_type_name(mode) +
                        ", not a regular file");
}

// Opens with `open` (which returns a descriptor or -1 with errno), then
// checks with fstat that what was opened is a regular file.
template <class Open>
InputFile open_checked(const std::string& function, const std::string& context,
                       const fs::path& path, Open open) {
  const int fd = open();
  if (fd < 0) fail_errno(function, context, "open", path, errno);
  InputFile file{function, context, path, FileDescriptor(fd), 0};
  struct ::stat info {};
  if (::fstat(fd, &info) != 0) fail_errno(function, context, "stat", path, errno);
  if (!S_ISREG(info.st_mode)) fail_not_regular(function, context, path, info.st_mode);
  file.size = static_cast<std::size_t>(info.st_size);
  return file;
}

void write_all(const std::string& function, int fd, const ByteSpan& part, const fs::path& path) {
  const auto* in = static_cast<const char*>(part.data);
  std::size_t n = part.size;
  while (n > 0) {
    const ::ssize_t put = ::write(fd, in, n);
    if (put < 0) {
      if (errno == EINTR) continue;
      fail_errno(function, "", "write", path, errno);
    }
    in += put;
    n -= static_cast<std::size_t>(put);
  }
}

}  // namespace

std::string path_str(const fs::path& path) {
  return quoted(escaped(path.string()));
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

int FileDescriptor::close() {
  const int result = ::close(fd_);
  fd_ = -1;
  return result;
}

std::string file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

void fail_errno(const std::string& function, const std::string& context, const std::string& action,
                const fs::path& path, int error) {
  fail_io(function, context + "cannot " + action + " " + path_str(path) + ": " +
                        std::generic_category().message(error));
}

bool is_plain_file_name(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '/' || u < 0x20 || u == 0x7f) return false;
  }
  return true;
}

InputFile open_regular_file(const std::string& function, const std::string& context,
                            const fs::path& path) {
  struct ::stat info {};
  if (::stat(path.c_str(), &info) != 0) fail_errno(function, context, "open", path, errno);
  if (!S_ISREG(info.st_mode)) fail_not_regular(function, context, path, info.st_mode);
  return open_checked(function, context, path, [&] { return ::open(path.c_str(), k_read_flags); });
}

InputFile open_directory_entry(const std::string& function, const std::string& context, int dir_fd,
                               const fs::path& dir, const std::string& name) {
  const fs::path path = dir / name;
  struct ::stat info {};
  if (::fstatat(dir_fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0)
    fail_errno(function, context, "open", path, errno);
  std::string entry = name;  // the entry to open: `name`, or the target of the link `name`
  if (S_ISLNK(info.st_mode)) {
    char buffer[k_max_link_target];
    const ::ssize_t length = ::readlinkat(dir_fd, name.c_str(), buffer, sizeof buffer);
    if (length < 0) fail_errno(function, context, "read the symbolic link", path, errno);
    const std::string target(buffer, static_cast<std::size_t>(length));
    if (static_cast<std::size_t>(length) == sizeof buffer || !is_plain_file_name(target))
      fail_io(function, context + "cannot read " + path_str(path) +
                            ": Is a symbolic link pointing outside the directory " + path_str(dir) +
                            " (to " + quoted(escaped(target, k_max_link_target)) +
                            "); only a link to another file of the same directory is followed");
    if (::fstatat(dir_fd, target.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0)
      fail_errno(function, context, "open the target of the symbolic link", path, errno);
    if (S_ISLNK(info.st_mode))
      fail_io(function, context + "cannot read " + path_str(path) +
                            ": Is a symbolic link to another symbolic link (" + quoted(target) +
                            "); only one level of links is followed");
    entry = target;
  }
  if (!S_ISREG(info.st_mode)) fail_not_regular(function, context, dir / entry, info.st_mode);
  // O_NOFOLLOW: if the entry became a link since fstatat, the open fails (ELOOP).
  return open_checked(function, context, path,
                      [&] { return ::openat(dir_fd, entry.c_str(), k_read_flags | O_NOFOLLOW); });
}

void read_exact(InputFile& file, void* buffer, std::size_t n) {
  auto* out = static_cast<char*>(buffer);
  while (n > 0) {
    const ::ssize_t got = ::read(file.fd.get(), out, n);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail_errno(file.function, file.context, "read", file.path, errno);
    }
    if (got == 0)
      fail_io(file.function, file.context + "cannot read " + path_str(file.path) +
                                 ": unexpected end of file (did it change?)");
    out += got;
    n -= static_cast<std::size_t>(got);
  }
}

void write_new_file(const fs::path& path, std::initializer_list<ByteSpan> parts,
                    const std::string& function) {
  write_new_file(path, std::vector<ByteSpan>(parts), function);
}

void write_new_file(const fs::path& path, const std::vector<ByteSpan>& parts,
                    const std::string& function) {
  const int raw = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (raw < 0) fail_errno(function, "", "create", path, errno);
  FileDescriptor fd(raw);
  try {
    for (const ByteSpan& part : parts) write_all(function, fd.get(), part, path);
    if (::fsync(fd.get()) != 0) fail_errno(function, "", "fsync", path, errno);
    if (fd.close() != 0) fail_errno(function, "", "close", path, errno);
  } catch (...) {
    if (fd.get() >= 0) fd.close();
    ::unlink(path.c_str());
    throw;
  }
}

void fsync_directory(const fs::path& dir) noexcept {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string random_suffix() {
  // random_device alone may be a deterministic PRNG on some platforms; the
  // counter keeps names of one process distinct regardless.
  static std::atomic<std::uint64_t> counter{0};
  std::random_device device;
  const std::uint64_t value = (std::uint64_t(device()) << 32 ^ device()) ^
                              (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull) ^
                              static_cast<std::uint64_t>(::getpid());
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

std::vector<std::string> text_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    lines.push_back(text.substr(pos, end - pos));
    if (!lines.back().empty() && lines.back().back() == '\r') lines.back().pop_back();
    pos = end + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

}  // namespace xtgrad::detail

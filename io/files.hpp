#pragma once
// Internal (not included by any public header): the POSIX file-system
// building blocks of the .npy and checkpoint code. Reading never blocks and
// never reads anything but a regular file; writing creates a new file
// (O_EXCL), fsyncs it and removes it again on failure.
//
// Errors: std::runtime_error "xtgrad::<function>: <context>cannot <action>
// '<path>': <reason>", where <context> is "" or names what the file is for
// ("parameter 'w1.weight': ").

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

namespace xtgrad::detail {

// Owns a file descriptor; -1 when empty.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileDescriptor& operator=(FileDescriptor&&) = delete;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // close() reports write-back errors on some file systems, so it is checked.
  int close();

 private:
  int fd_;
};

// A regular file open for reading, with what messages say about it.
struct InputFile {
  std::string function;  // messages start "xtgrad::<function>: "
  std::string context;   // then this: "" or "parameter 'w1.weight': "
  std::filesystem::path path;
  FileDescriptor fd;
  std::size_t size = 0;  // from fstat when opened
};

// A path as messages quote it: 'path', control characters escaped.
std::string path_str(const std::filesystem::path& path);

// "a directory", "a FIFO", "a socket", "a character device", ... for a
// st_mode that is not a regular file.
std::string file_type_name(mode_t mode);

// std::runtime_error "<context>cannot <action> '<path>': <strerror(error)>".
[[noreturn]] void fail_errno(const std::string& function, const std::string& context,
                             const std::string& action, const std::filesystem::path& path,
                             int error);

// A name usable as a file inside a checkpoint and as a TSV field: not empty,
// no '/', no control characters, not hidden ('.', '..', '.x').
bool is_plain_file_name(const std::string& name);

// Opens `path` for reading, following symbolic links (the caller named it).
// Anything but a regular file (directory, FIFO, socket, device) is refused
// before it is opened, and again after (fstat), so that nothing blocks and no
// device is touched.
InputFile open_regular_file(const std::string& function, const std::string& context,
                            const std::filesystem::path& path);

// Opens the entry `name` of the directory open as `dir_fd` (at path `dir`,
// for messages), relative to that descriptor and with O_NOFOLLOW, as above.
// A symbolic link is followed only when its target is a plain file name, that
// is another entry of the same directory, and that entry is itself a regular
// file; a link anywhere else ("/etc/passwd", "../x", "sub/x") is refused as
// pointing outside the directory. (An entry replaced by a device between the
// type check and the open would be opened, without blocking and without
// becoming a controlling terminal, and then refused by fstat, never read.)
InputFile open_directory_entry(const std::string& function, const std::string& context, int dir_fd,
                               const std::filesystem::path& dir, const std::string& name);

// Reads exactly n bytes or throws: sizes are checked against fstat first, so
// a short read means the file changed while it was read.
void read_exact(InputFile& file, void* buffer, std::size_t n);

// Bytes to write.
struct ByteSpan {
  const void* data;
  std::size_t size;
};

// Creates `path` (O_EXCL: it must not exist), writes `parts` in order, fsyncs
// and closes it; on any failure the partial file is removed.
void write_new_file(const std::filesystem::path& path, std::initializer_list<ByteSpan> parts,
                    const std::string& function);
void write_new_file(const std::filesystem::path& path, const std::vector<ByteSpan>& parts,
                    const std::string& function);

// Best-effort fsync of a directory, so that renames inside it are durable.
// Errors are ignored: some file systems refuse fsync on directories, and the
// rename it follows has already succeeded.
void fsync_directory(const std::filesystem::path& dir) noexcept;

// 16 random hex digits for temporary names.
std::string random_suffix();

// The lines of a text file's contents, each without its '\n' and one '\r'
// before it (CRLF files read as LF ones), the empty lines at the end dropped.
std::vector<std::string> text_lines(const std::string& text);

}  // namespace xtgrad::detail

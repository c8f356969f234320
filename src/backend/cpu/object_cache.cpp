#include "backend/cpu/object_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "parhelion/error.h"

namespace parhelion::backend::cpu {
namespace fs = std::filesystem;
namespace {

std::string manifest_path(const std::string& object) { return object + ".sum"; }

// A name no other process or thread writing the same file will pick.
std::string temp_name(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
}

bool read_whole(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return !f.bad();
}

// fsync a file (or, for a rename to be durable, its directory).
bool sync_path(const std::string& path, int flags) {
  int fd = open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = fsync(fd) == 0;
  close(fd);
  return ok;
}

std::string manifest_for(const std::string& bytes) {
  return std::to_string(bytes.size()) + " " + content_hash(bytes) + "\n";
}

}  // namespace

std::string content_hash(const std::string& s) {
  // FNV-1a-style, two independent 64-bit lanes.
  uint64_t h1 = 1469598103934665603ull, h2 = 0x9e3779b97f4a7c15ull;
  for (unsigned char c : s) {
    h1 = (h1 ^ c) * 1099511628211ull;
    h2 = (h2 ^ c) * 0x100000001b3ull + 0x632be59bd9b4e019ull;
    h2 ^= h2 >> 29;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h1),
                static_cast<unsigned long long>(h2));
  return buf;
}

void write_file_atomically(const std::string& path, const std::string& content) {
  std::string tmp = temp_name(path);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << content;
    f.flush();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw UserError("cannot write " + tmp + " (is the disk full?)");
    }
  }
  std::error_code ec;
  if (!sync_path(tmp, O_RDONLY)) {
    fs::remove(tmp, ec);
    throw UserError("cannot write " + tmp + " to disk (fsync failed; is the disk full?)");
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw UserError("cannot move " + tmp + " to " + path + ": " + ec.message());
  }
  sync_path(fs::path(path).parent_path().string(), O_RDONLY | O_DIRECTORY);
}

void commit_object(const std::string& built, const std::string& object) {
  std::string bytes;
  std::error_code ec;
  if (!read_whole(built, &bytes) || !sync_path(built, O_RDONLY)) {
    fs::remove(built, ec);
    throw UserError("cannot read back the compiled kernel " + built + " (is the disk full?)");
  }
  // The manifest first, then the object: a reader between the two sees them disagree and
  // rebuilds (a rename replaces the file atomically); nothing is ever deleted under another
  // process that has just committed the same entry.
  write_file_atomically(manifest_path(object), manifest_for(bytes));
  fs::rename(built, object, ec);
  if (ec) {
    fs::remove(built, ec);
    throw UserError("cannot move the compiled kernel into the cache: " + ec.message());
  }
}

bool object_is_intact(const std::string& object) {
  std::string manifest, bytes;
  if (!read_whole(manifest_path(object), &manifest) || !read_whole(object, &bytes)) return false;
  return manifest == manifest_for(bytes);
}

void discard_object(const std::string& object) {
  std::error_code ec;
  fs::remove(object, ec);
  fs::remove(manifest_path(object), ec);
}

}  // namespace parhelion::backend::cpu

// The integrity of the JIT's on-disk objects.
//
// A shared object cut short (a crash, a full disk, a kill while it was written) still opens:
// dlopen maps segments past the end of the file, and the first touch of one is SIGBUS, in every
// later process, until someone deletes the file by hand. So an object enters the cache only
// complete and on disk (fsync, then rename), with a manifest beside it recording its size and
// hash; a loader checks both first and rebuilds an object that does not match, or has none.
#pragma once

#include <string>

namespace parhelion::backend::cpu {

// A 128-bit hash as 32 hex digits (cache keys and manifests; not security).
std::string content_hash(const std::string& bytes);

// Writes `content` to `path` so that readers see the old file or all of the new one: a temp
// file in the same directory, fsync, rename. Throws UserError if it cannot.
void write_file_atomically(const std::string& path, const std::string& content);

// Moves the finished object `built` (e.g. the compiler's temp output) to `object` and records
// its manifest: fsync first, so that a crash never leaves a renamed but unwritten file.
void commit_object(const std::string& built, const std::string& object);

// Whether `object` exists, has a manifest, and matches its recorded size and hash.
bool object_is_intact(const std::string& object);

// Removes `object` and its manifest (a failed check: the next build replaces both).
void discard_object(const std::string& object);

}  // namespace parhelion::backend::cpu

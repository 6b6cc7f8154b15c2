// Whole-file output that never leaves a half-written file behind.
#pragma once

#include <string>
#include <string_view>

namespace kformer {

// Writes `bytes` to a temporary file next to `path`, flushes it to disk and renames it over
// `path`: readers see the old file or the new one, never a mix, and a failure leaves any existing
// file untouched. Throws kformer::Error naming the path and the system's reason.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Throws kformer::Error "<where>: cannot read '<path>': ..." unless path names a regular file:
// missing, a directory, a FIFO (whose open would wait for a writer forever), a device or a socket.
// It only looks (stat), so it never blocks; check before opening.
void require_regular_file(const std::string& path, const std::string& where);

}  // namespace kformer

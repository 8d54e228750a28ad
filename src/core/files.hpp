#pragma once
// Whole-file reads and writes that a reader on another process or machine can rely on.

#include <filesystem>
#include <string>

namespace npuopt {

/// The file's bytes; "" when it cannot be read (a missing file is not an error here).
std::string read_file_text(const std::filesystem::path& file);

/// `text` written to `file` through `<file>.partial` renamed into place, so that a reader never
/// sees half a file. Error(io) naming the file when it cannot be written.
void write_file_atomically(const std::filesystem::path& file, const std::string& text);

}  // namespace npuopt

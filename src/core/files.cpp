#include "core/files.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"

namespace npuopt {

std::string read_file_text(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

void write_file_atomically(const std::filesystem::path& file, const std::string& text) {
    const std::filesystem::path partial = file.string() + ".partial";
    {
        std::ofstream out(partial, std::ios::binary | std::ios::trunc);
        out << text;
        if (!out.flush()) throw Error(ErrorKind::io, fmt::format("cannot write {}", partial.string()));
    }
    std::error_code error;
    std::filesystem::rename(partial, file, error);
    if (error) throw Error(ErrorKind::io, fmt::format("cannot rename {} to {}: {}", partial.string(), file.string(), error.message()));
}

}  // namespace npuopt

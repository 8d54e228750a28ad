// The child's environment: an allow-list from the parent, never a secret; executable lookup.

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <sys/stat.h>

#include "proc/subprocess.hpp"

namespace npuopt::proc {

const std::vector<std::string>& environment_allow_list() {
    static const std::vector<std::string> k_allow_list = {
        "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_MESSAGES", "LC_COLLATE",
        "TZ", "TERM", "USER", "LOGNAME", "SOURCE_DATE_EPOCH",
    };
    return k_allow_list;
}

bool is_secret_name(std::string_view name) {
    static constexpr std::array<std::string_view, 7> k_secret_fragments = {
        "KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH",
    };
    std::string upper(name);
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
    return std::any_of(k_secret_fragments.begin(), k_secret_fragments.end(),
                       [&](std::string_view fragment) { return upper.find(fragment) != std::string::npos; });
}

namespace {

bool is_executable_file(const std::filesystem::path& path) {
    struct stat info {};
    return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::optional<std::filesystem::path> find_executable(const std::string& name, const std::string& search_path) {
    if (name.empty()) return std::nullopt;
    if (name.find('/') != std::string::npos) {
        if (is_executable_file(name)) return std::filesystem::path(name);
        return std::nullopt;
    }
    std::size_t begin = 0;
    while (begin <= search_path.size()) {
        std::size_t end = search_path.find(':', begin);
        if (end == std::string::npos) end = search_path.size();
        std::filesystem::path dir =
            end == begin ? std::filesystem::path(".") : std::filesystem::path(search_path.substr(begin, end - begin));
        std::filesystem::path candidate = dir / name;
        if (is_executable_file(candidate)) return candidate;
        begin = end + 1;
    }
    return std::nullopt;
}

}  // namespace npuopt::proc

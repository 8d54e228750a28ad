#pragma once
// A scratch directory removed with its contents when the test ends.

#include <filesystem>
#include <random>
#include <string>

namespace npuopt::fakes {

class TempDir {
public:
    explicit TempDir(const std::string& prefix = "npuopt-test") {
        std::random_device entropy;
        m_path = std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(entropy()) + std::to_string(entropy()));
        std::filesystem::create_directories(m_path);
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(m_path, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return m_path; }

private:
    std::filesystem::path m_path;
};

}  // namespace npuopt::fakes

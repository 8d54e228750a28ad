#pragma once
// Helpers for config tests: scratch files and "this throws an Error whose message has ...".

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "core/error.hpp"

namespace npuopt::test {

/// A fresh directory under the system temp dir, removed at scope exit.
class ScratchDir {
public:
    ScratchDir() {
        std::random_device random;
        m_path = std::filesystem::temp_directory_path() / ("npuopt-test-" + std::to_string(random()));
        std::filesystem::create_directories(m_path);
    }
    ~ScratchDir() {
        std::error_code ignored;
        std::filesystem::remove_all(m_path, ignored);
    }
    const std::filesystem::path& path() const { return m_path; }
    std::filesystem::path write(const std::string& name, const std::string& text) const {
        std::filesystem::path file = m_path / name;
        std::filesystem::create_directories(file.parent_path());
        std::ofstream(file) << text;
        return file;
    }

private:
    std::filesystem::path m_path;
};

/// Run `action`; return the Error's message (failing the test when nothing or something else is thrown).
inline std::string error_message(const std::function<void()>& action, ErrorKind expected_kind) {
    try {
        action();
    } catch (const Error& error) {
        CHECK(error.kind() == expected_kind);
        return error.what();
    }
    FAIL("expected npuopt::Error, nothing was thrown");
    return {};
}

}  // namespace npuopt::test

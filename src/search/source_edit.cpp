#include "search/source_edit.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "proc/subprocess.hpp"

namespace npuopt::search {

namespace fs = std::filesystem;

namespace {

/// A scratch directory removed when it goes out of scope.
struct ScratchDir {
    fs::path path;
    ScratchDir() {
        std::string pattern = (fs::temp_directory_path() / "npuopt-edit-XXXXXX").string();
        if (::mkdtemp(pattern.data()) != nullptr) path = pattern;
    }
    ~ScratchDir() {
        std::error_code ignored;
        if (!path.empty()) fs::remove_all(path, ignored);
    }
};

}  // namespace

bool looks_like_unified_diff(const std::string& text) {
    const bool hunk = text.rfind("@@ -", 0) == 0 || text.find("\n@@ -") != std::string::npos;
    return hunk;
}

EditResult apply_unified_diff(const std::string& original, const std::string& diff) {
    EditResult result;
    const auto patch = proc::find_executable("patch", std::getenv("PATH") != nullptr ? std::getenv("PATH") : "/usr/bin:/bin");
    if (!patch) {
        result.error = "GNU patch is not installed (Debian: apt-get install patch): a diff cannot be applied";
        return result;
    }
    ScratchDir scratch;
    if (scratch.path.empty()) {
        result.error = "cannot make a scratch directory to apply the diff in";
        return result;
    }
    {
        std::ofstream out(scratch.path / "kernel.src", std::ios::binary);
        out << original;
        if (!out) {
            result.error = "cannot write the source to patch";
            return result;
        }
    }
    proc::Command command;
    command.argv = {patch->string(), "--batch", "--forward", "--silent", "--no-backup-if-mismatch", "--reject-file=-",
                    "-o", "patched.src", "kernel.src"};
    command.cwd = scratch.path;
    command.stdin_data = diff;
    command.limits.timeout_secs = 10.0;
    command.limits.output_cap_bytes = 16 << 10;
    command.sandbox.enabled = true;
    command.sandbox.required = false;
    command.sandbox.scratch_dir = scratch.path;
    const proc::Result run = proc::run(command);
    if (!run.ok()) {
        std::string message = run.stdout_text + run.stderr_text;
        while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
        result.error = fmt::format("the diff does not apply ({}){}{}",
                                   run.timed_out ? "patch timed out"
                                   : run.exit_code ? fmt::format("patch exit {}", *run.exit_code)
                                                   : run.error.value_or("patch did not run"),
                                   message.empty() ? "" : ": ", message.substr(0, 400));
        return result;
    }
    std::ifstream in(scratch.path / "patched.src", std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in && !in.eof()) {
        result.error = "patch ran but wrote no result";
        return result;
    }
    result.source = text.str();
    return result;
}

}  // namespace npuopt::search

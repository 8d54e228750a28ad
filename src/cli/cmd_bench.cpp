// `npuopt bench kb|acceptance|search|refresh|throughput|adversarial|llm`: run the benchmark programs built beside npuopt. Only those
// programs may read the simulator's true profile; npuopt itself never does.

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/error.hpp"

namespace npuopt::cli {
namespace {

namespace fs = std::filesystem;

/// The directory of the running npuopt binary.
fs::path self_dir(const std::string& argv0) {
    std::error_code error;
    auto self = fs::read_symlink("/proc/self/exe", error);
    if (error || self.empty()) self = fs::absolute(argv0, error);
    return self.parent_path();
}

std::optional<fs::path> find_program(const fs::path& dir, const std::vector<std::string>& names) {
    for (const auto& name : names) {
        for (const auto& candidate : {dir / name, dir / "tools" / "bench" / name}) {
            if (::access(candidate.c_str(), X_OK) == 0 && fs::is_regular_file(candidate)) return candidate;
        }
    }
    return std::nullopt;
}

/// Replace npuopt with `program args…` (its output and exit code become ours).
[[noreturn]] void exec_program(const fs::path& program, const std::vector<std::string>& args) {
    std::vector<std::string> argv_text = {program.string()};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& arg : argv_text) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::cout.flush();
    std::cerr.flush();
    ::execv(program.c_str(), argv.data());
    throw Error(ErrorKind::io, fmt::format("cannot run {}: {}", program.string(), std::strerror(errno)));
}

}  // namespace

int run_bench(const GlobalOptions& global, const BenchOptions& options) {
    const fs::path dir = self_dir(options.argv0);
    std::vector<std::string> args;
    if (global.json) args.push_back("--json");
    if (options.device_runs) {
        if (options.what != "search" && options.what != "refresh" && options.what != "throughput") {
            throw Error(ErrorKind::invalid_input,
                        "bench: --device-runs is for `bench search`, `bench refresh` and `bench throughput`");
        }
        if (*options.device_runs <= 0) throw Error(ErrorKind::invalid_input, "bench: --device-runs must be positive");
        args.push_back("--device-runs");
        args.push_back(std::to_string(*options.device_runs));
    }
    args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
    if (global.knowledge_dir && (options.what == "search" || options.what == "adversarial" || options.what == "refresh" ||
                                  options.what == "llm" || options.what == "throughput")) {
        args.push_back("--knowledge-dir");
        args.push_back(global.knowledge_dir->string());
    }

    std::vector<std::string> names;
    std::string build_target;
    if (options.what == "kb") {
        names = {"npuopt_bench_kb"};
        build_target = "npuopt_bench_kb";
    } else if (options.what == "acceptance") {
        names = {"acceptance", "npuopt_bench_acceptance"};
        build_target = "npuopt_bench_acceptance";
    } else if (options.what == "search") {
        names = {"search_bench", "npuopt_bench_search"};
        build_target = "npuopt_bench_search";
    } else if (options.what == "refresh") {
        names = {"refresh_bench", "npuopt_bench_refresh"};
        build_target = "npuopt_bench_refresh";
    } else if (options.what == "throughput") {
        names = {"throughput_bench", "npuopt_bench_throughput"};
        build_target = "npuopt_bench_throughput";
    } else if (options.what == "adversarial") {
        names = {"adversarial_bench", "npuopt_bench_adversarial"};
        build_target = "npuopt_bench_adversarial";
    } else if (options.what == "llm") {
        names = {"llm_bench", "npuopt_bench_llm"};
        build_target = "npuopt_bench_llm";
    } else {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("bench: unknown benchmark '{}' (kb, acceptance, search, refresh, throughput, adversarial or llm)", options.what));
    }
    if (auto program = find_program(dir, names)) exec_program(*program, args);
    throw Error(ErrorKind::io, fmt::format("bench {}: the benchmark program {} is not built beside {} (build it with "
                                           "`cmake --build <build> --target {}`)",
                                           options.what, names.front(), dir.string(), build_target));
}

}  // namespace npuopt::cli

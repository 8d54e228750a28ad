#pragma once
// Runs `npuopt ARGS...` in-process (cli::run_main) with std::cout and std::cerr captured.

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/app.hpp"

namespace npuopt::testing {

struct Captured {
    int exit_code = -1;
    std::string out;  ///< what went to std::cout
    std::string err;  ///< what went to std::cerr
};

inline Captured run_cli(std::vector<std::string> args) {
    args.insert(args.begin(), "npuopt");
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::ostringstream out, err;
    auto* saved_out = std::cout.rdbuf(out.rdbuf());
    auto* saved_err = std::cerr.rdbuf(err.rdbuf());
    Captured captured;
    captured.exit_code = cli::run_main(static_cast<int>(args.size()), argv.data());
    std::cout.rdbuf(saved_out);
    std::cerr.rdbuf(saved_err);
    captured.out = out.str();
    captured.err = err.str();
    return captured;
}

}  // namespace npuopt::testing

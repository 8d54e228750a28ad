// `npuopt bench adversarial [--json] [--dir DIR] [-- --only A,B --no-controls --keep --toolchain NPUC
//  --cycles-before FILE --save-cycles FILE --cycles-tolerance X]`

#include "cli/bench_adversarial.hpp"

#include <iostream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "report/adversarial_bench.hpp"

namespace npuopt::cli {

int run_bench_adversarial(const GlobalOptions& global, const BenchOptions& options) {
    report::AdversarialOptions bench;
    bench.knowledge_dir = global.knowledge_dir;
    const auto& args = options.extra_args;
    for (std::size_t index = 0; index < args.size(); ++index) {
        const std::string& arg = args[index];
        auto value = [&]() -> std::string {
            if (index + 1 >= args.size()) throw Error(ErrorKind::invalid_input, fmt::format("bench adversarial: {} needs a value", arg));
            return args[++index];
        };
        if (arg == "--dir") {
            bench.corpus_dir = value();
        } else if (arg == "--only") {
            std::string list = value();
            for (std::size_t start = 0; start <= list.size();) {
                std::size_t end = list.find(',', start);
                if (end == std::string::npos) end = list.size();
                if (end > start) bench.only.push_back(list.substr(start, end - start));
                start = end + 1;
            }
        } else if (arg == "--no-controls") {
            bench.controls = false;
        } else if (arg == "--keep") {
            bench.keep = true;
        } else if (arg == "--toolchain") {
            bench.toolchain = value();
        } else if (arg == "--cycles-before") {
            bench.cycles_before = value();
        } else if (arg == "--save-cycles") {
            bench.save_cycles = value();
        } else if (arg == "--cycles-tolerance") {
            try {
                bench.cycles_tolerance = std::stod(value());
            } catch (const std::exception&) {
                throw Error(ErrorKind::invalid_input, "bench adversarial: --cycles-tolerance needs a number");
            }
        } else {
            throw Error(ErrorKind::invalid_input,
                        fmt::format("bench adversarial: unknown argument '{}' (--dir, --only, --no-controls, --keep, "
                                    "--toolchain, --cycles-before, --save-cycles, --cycles-tolerance)",
                                    arg));
        }
    }
    if (!bench.cycles_before) {
        const auto dir = bench.corpus_dir.empty() ? std::filesystem::path(NPUOPT_SOURCE_DIR) / "tests" / "data" / "adversarial"
                                                  : bench.corpus_dir;
        if (std::filesystem::exists(dir / "controls_before.json")) bench.cycles_before = dir / "controls_before.json";
    }
    if (!global.json) {
        bench.on_row = [](const report::AdversarialRow& row) {
            std::cerr << fmt::format("  {:<34} {:<9} {:<9} {}{} ({:.0f} s)\n", row.item.name, row.item.expect,
                                     row.verdict, row.met ? "" : "[expectation NOT met] ",
                                     row.escapes.empty() ? row.stage : "escaped: " + row.escapes.front(), row.secs);
        };
    }
    const auto report = report::run_adversarial_bench(bench);
    if (global.json) {
        std::cout << report::adversarial_report_json(report).dump() << "\n";
    } else {
        std::cout << report::adversarial_report_table(report);
    }
    return report.goals_met() ? k_exit_ok : k_exit_failure;
}

}  // namespace npuopt::cli

// The adversarial benchmark program, run by `npuopt bench adversarial [--json] [--dir DIR] [-- --only A,B
// --no-controls --keep --toolchain NPUC --cycles-before FILE --save-cycles FILE --cycles-tolerance X]`:
// the corpus of tests/data/adversarial and the honest controls through the cascade on npu-sim.
// A benchmark of npu-sim, so it lives beside the others in tools/bench, not in src/.

#include <iostream>

#include <fmt/format.h>

#include "adversarial_bench.hpp"
#include "core/error.hpp"

namespace npuopt::bench {
namespace {

int run(const std::vector<std::string>& args) {
    AdversarialOptions bench;
    bool json = false;
    for (std::size_t index = 0; index < args.size(); ++index) {
        const std::string& arg = args[index];
        auto value = [&]() -> std::string {
            if (index + 1 >= args.size()) throw Error(ErrorKind::invalid_input, fmt::format("bench adversarial: {} needs a value", arg));
            return args[++index];
        };
        if (arg == "--json") {
            json = true;
        } else if (arg == "--knowledge-dir") {
            bench.knowledge_dir = std::filesystem::path(value());
        } else if (arg == "--dir") {
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
                        fmt::format("bench adversarial: unknown argument '{}' (--json, --knowledge-dir, --dir, --only, --no-controls, --keep, "
                                    "--toolchain, --cycles-before, --save-cycles, --cycles-tolerance)",
                                    arg));
        }
    }
    if (!bench.cycles_before) {
        const auto dir = bench.corpus_dir.empty() ? std::filesystem::path(NPUOPT_SOURCE_DIR) / "tests" / "data" / "adversarial"
                                                  : bench.corpus_dir;
        if (std::filesystem::exists(dir / "controls_before.json")) bench.cycles_before = dir / "controls_before.json";
    }
    if (!json) {
        bench.on_row = [](const AdversarialRow& row) {
            std::cerr << fmt::format("  {:<34} {:<9} {:<9} {}{} ({:.0f} s)\n", row.item.name, row.item.expect,
                                     row.verdict, row.met ? "" : "[expectation NOT met] ",
                                     row.escapes.empty() ? row.stage : "escaped: " + row.escapes.front(), row.secs);
        };
    }
    const auto report = run_adversarial_bench(bench);
    if (json) {
        std::cout << adversarial_report_json(report).dump() << "\n";
    } else {
        std::cout << adversarial_report_table(report);
    }
    return report.goals_met() ? 0 : 1;
}

}  // namespace
}  // namespace npuopt::bench

int main(int argc, char** argv) {
    try {
        return npuopt::bench::run(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const npuopt::Error& error) {
        std::cerr << "npuopt_bench_adversarial: error: " << error.what() << '\n';
        return error.kind() == npuopt::ErrorKind::invalid_input ? 2 : 1;
    } catch (const std::exception& error) {
        std::cerr << "npuopt_bench_adversarial: error: " << error.what() << '\n';
        return 1;
    }
}

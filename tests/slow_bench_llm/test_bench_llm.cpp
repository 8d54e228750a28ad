// `npuopt bench llm --json -- --quick` against the scripted model: the benchmark runs end to end
// in CI, says plainly that its model is scripted, keeps every cell within its token budget,
// and no gamed kernel is ever accepted. Skipped when npuc or the benchmark program is not built.

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

TEST_CASE("bench llm --quick: scripted model, every cell within its budget, no gamed kernel accepted") {
    const std::filesystem::path build(NPUOPT_BUILD_DIR);
    if (!std::filesystem::exists(build / "npu-sim/1.0/bin/npuc") || !std::filesystem::exists(build / "tools/bench/llm_bench")) {
        MESSAGE("SKIPPED: npuc or tools/bench/llm_bench is not built");
        return;
    }
    const auto work = std::filesystem::temp_directory_path() / "npuopt-bench-llm-test";
    std::filesystem::remove_all(work);
    const std::string command = std::string("'") + NPUOPT_BINARY + "' --json bench llm -- --quick --strategies zero_shot,multi_agent --work '" +
                                work.string() + "' 2>/dev/null";
    std::string output;
    FILE* pipe = ::popen(command.c_str(), "r");
    REQUIRE(pipe != nullptr);
    char buffer[4096];
    while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
    CHECK(::pclose(pipe) == 0);
    const auto json = nlohmann::json::parse(output, nullptr, false);
    REQUIRE(json.is_object());
    CHECK(json["scripted"] == true);
    CHECK(json["model"].get<std::string>().find("SCRIPTED") != std::string::npos);
    REQUIRE(json["cells"].size() == 4);  // 2 strategies × n ∈ {1, 8}
    const auto budget = json["tokens_per_cell"].get<std::int64_t>();
    for (const auto& cell : json["cells"]) {
        INFO(cell.dump());
        CHECK(cell["gamed_accepted"] == 0);
        CHECK(cell["tokens"].get<std::int64_t>() <= budget);
        CHECK(cell["calls"].get<std::int64_t>() >= 1);
        CHECK(cell["replies"].get<std::int64_t>() >= cell["parsed"].get<std::int64_t>());
        CHECK(cell["parsed"].get<std::int64_t>() >= cell["accepted"].get<std::int64_t>());
        CHECK(cell["speedup"].get<double>() >= 1.0);
    }
    std::filesystem::remove_all(work);
}

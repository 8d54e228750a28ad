// End to end on the real simulator: a short campaign on attention_output through report::run_workspace
// (toolchain, sandbox, cascade, driver). Skipped (with a message) when npuc is not built:
//   tools/npu-sim/build.sh build-camp/npu-sim build-camp/cargo
// or point NPUOPT_NPUC at an npuc binary.

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "report/workspace.hpp"
#include "search/tree.hpp"
#include "store/campaign_store.hpp"
#include "store/database.hpp"
#include "store/tree_store.hpp"

using namespace npuopt;

namespace {

std::filesystem::path find_npuc() {
    if (const char* explicit_path = std::getenv("NPUOPT_NPUC")) return explicit_path;
    return std::filesystem::path(NPUOPT_BUILD_DIR) / "npu-sim" / "1.0" / "bin" / "npuc";
}

}  // namespace

TEST_CASE("a short campaign on the simulator improves attention_output and resumes") {
    auto npuc = find_npuc();
    if (!std::filesystem::exists(npuc)) {
        MESSAGE("SKIPPED: npuc not built at " << npuc.string() << " (tools/npu-sim/build.sh or NPUOPT_NPUC)");
        return;
    }
    std::random_device random;
    auto dir = std::filesystem::temp_directory_path() / ("npuopt-slow-campaign-" + std::to_string(random()));
    std::filesystem::create_directories(dir);
    {
        std::ofstream yaml(dir / "campaign.yaml");
        yaml << fmt::format(
            "target: npu-sim\nkernels: [attention_output]\nseed: 11\n"
            "budgets: {{wall_time: 20m, device_runs: 400}}\nsandbox: {{required: false}}\n"
            "toolchain: {{bin: {}}}\n",
            std::filesystem::absolute(npuc).string());
    }
    store::CampaignStore::open(dir / "campaign.db");  // what `npuopt init` creates beside campaign.yaml
    std::vector<campaign::Progress> updates;
    report::RunOverrides options;
    options.max_steps = 4;
    options.progress = [&](const campaign::Progress& progress) { updates.push_back(progress); };
    auto first = [&] {
        auto workspace = report::open_workspace(dir, std::nullopt);
        return report::run_workspace(workspace, options);
    }();
    INFO(first.message);
    CHECK(first.stop == campaign::StopReason::step_limit);
    REQUIRE(first.kernels.size() == 1);
    INFO(first.kernels[0].reason);
    REQUIRE(first.kernels[0].baseline_cycles.has_value());
    REQUIRE(first.kernels[0].champion_cycles.has_value());

    options.max_steps = 3;
    auto second = [&] {
        auto workspace = report::open_workspace(dir, std::nullopt);
        return report::run_workspace(workspace, options);
    }();
    CHECK(second.steps_this_run == 3);
    auto store = store::CampaignStore::open(dir / "campaign.db");
    auto tree = search::load_tree(store, "attention_output");
    CHECK(tree.nodes.size() == 7);
    std::set<std::string> hashes;
    for (const auto& node : tree.nodes) CHECK(hashes.insert(node.design.content_hash).second);
    MESSAGE(search::render_tree_text(tree, true));
    CHECK(*second.kernels[0].champion_cycles <= *second.kernels[0].baseline_cycles);
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
}

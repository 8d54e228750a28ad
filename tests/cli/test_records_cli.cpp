// `npuopt export` / `npuopt import` in-process (cli::run_main) on two npu-sim campaigns whose
// toolchain is absent (nothing runs): the commands, their --json summaries, exit codes and errors.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "campaign/records_io.hpp"
#include "campaign/workspace.hpp"
#include "cli_capture.hpp"
#include "search/design.hpp"
#include "store/campaign_store.hpp"
#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;
using npuopt::testing::run_cli;

namespace {

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

/// A fresh npu-sim campaign whose toolchain is a path that does not exist (its version: unknown).
void init_campaign(const fs::path& dir) {
    auto init = run_cli({"init", dir.string(), "--target", "npu-sim"});
    REQUIRE_MESSAGE(init.exit_code == 0, init.err);
    std::ifstream in(dir / "campaign.yaml");
    std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto at = yaml.find("  bin: \"\"");
    REQUIRE(at != std::string::npos);
    yaml.replace(at, std::string("  bin: \"\"").size(), "  bin: /nonexistent/npuopt-test/npuc");
    std::ofstream(dir / "campaign.yaml") << yaml;
}

/// One design of the campaign's first kernel, of its shape, with a passing correctness step of
/// two launches under its bench config and npuc 1.0.0.
void add_records(const fs::path& dir) {
    auto workspace = npuopt::campaign::open_workspace(dir, std::nullopt);
    const npuopt::campaign::CampaignFacts facts = npuopt::campaign::campaign_facts(workspace);
    REQUIRE(!facts.kernels.empty());
    const auto& [kernel, kernel_facts] = *facts.kernels.begin();
    npuopt::store::CampaignStore& store = *workspace.store;
    npuopt::store::DesignRecord design;
    design.kernel = kernel;
    design.target = "npu-sim";
    design.shape = kernel_facts.shape;
    design.template_name = "user";
    design.source = "fn main() {}\n";
    design.content_hash = npuopt::search::design_hash(design.target, design.kernel, design.shape, *design.source);
    npuopt::store::EvaluationRecord evaluation;
    evaluation.design_id = store.record_design(design);
    evaluation.toolchain_version_id = store.record_toolchain_version("npu-sim", "npuc", "1.0.0");
    evaluation.bench_config_hash = kernel_facts.bench_config_hashes.front();
    evaluation.stage = "correctness";
    evaluation.verdict = "pass";
    std::vector<npuopt::store::MeasurementRecord> measurements(2);
    measurements[0].cycles = 100.0;
    measurements[1].cycles = 101.0;
    measurements[1].launch_order = 1;
    store.record_evaluation(evaluation, measurements);
}

std::string read_text(const fs::path& file) {
    std::ifstream in(file);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("records: npuopt export and import move a campaign's records, once, and say what they did") {
    npuopt::fakes::TempDir scratch("npuopt-cli-records");
    const fs::path c1 = scratch.path() / "c1";
    const fs::path c2 = scratch.path() / "c2";
    const fs::path file = scratch.path() / "records.jsonl";
    init_campaign(c1);
    init_campaign(c2);
    add_records(c1);

    auto exported = run_cli({"--json", "export", c1.string(), "--out", file.string()});
    REQUIRE_MESSAGE(exported.exit_code == 0, exported.err);
    const auto summary = nlohmann::json::parse(exported.out);
    CHECK(summary["designs"] == 1);
    CHECK(summary["evaluations"] == 1);
    CHECK(summary["measurements"] == 2);
    const std::string written = read_text(file);

    auto refused = run_cli({"export", "--campaign", c1.string(), "--out", file.string()});
    CHECK(refused.exit_code == 2);
    CHECK(has(refused.err, "exists; pass --force to overwrite it"));
    CHECK(read_text(file) == written);
    CHECK(run_cli({"export", c1.string(), "--out", file.string(), "--force"}).exit_code == 0);

    auto dry = run_cli({"--json", "import", file.string(), "--campaign", c2.string(), "--dry-run"});
    REQUIRE_MESSAGE(dry.exit_code == 0, dry.err);
    const auto planned = nlohmann::json::parse(dry.out);
    CHECK(planned["dry_run"] == true);
    CHECK(planned["designs"]["added"] == 1);
    CHECK(planned["designs"]["queued"] == 1);
    CHECK(planned["evaluations"]["stale"] == 1);  // c2's toolchain version is unknown
    CHECK(nlohmann::json::parse(run_cli({"--json", "status", c2.string()}).out)["imports"]["count"] == 0);

    auto imported = run_cli({"import", file.string(), c2.string()});
    REQUIRE_MESSAGE(imported.exit_code == 0, imported.err);
    CHECK(has(imported.out, "imported " + file.string() + " (campaign c1, npu-sim)"));
    CHECK(has(imported.out, "1 added (1 stale)"));
    CHECK(has(imported.out, "this campaign's toolchain version is unknown"));
    CHECK(has(imported.out, "queued       1 design(s) (--queue passed)"));
    const auto status = nlohmann::json::parse(run_cli({"--json", "status", c2.string()}).out);
    CHECK(status["imports"]["count"] == 1);
    CHECK(status["imports"]["sources"].at(0) == file.string() + " (campaign c1)");
    CHECK(has(run_cli({"status", c2.string()}).out, "imports    1: 1 designs, 1 evaluations (1 stale)"));

    auto again = run_cli({"import", file.string(), "--campaign", c2.string()});
    CHECK(again.exit_code == 0);
    CHECK(has(again.out, "nothing new"));
}

TEST_CASE("records: npuopt import of a damaged file or with a wrong --queue exits 2 naming the problem") {
    npuopt::fakes::TempDir scratch("npuopt-cli-records");
    const fs::path c2 = scratch.path() / "c2";
    init_campaign(c2);
    const fs::path file = scratch.path() / "broken.jsonl";
    std::ofstream(file) << "{\"record\": \"header\", \"format\": \"npuopt-records\", \"version\": 9}\n";

    auto broken = run_cli({"--json", "import", file.string(), "--campaign", c2.string()});
    CHECK(broken.exit_code == 2);
    CHECK(has(broken.err, file.string() + ":1: header: field 'version' is 9"));
    CHECK(nlohmann::json::parse(broken.out)["kind"] == "invalid_input");

    CHECK(run_cli({"import", file.string(), "--campaign", c2.string(), "--queue", "some"}).exit_code == 2);
    CHECK(run_cli({"import", (scratch.path() / "missing.jsonl").string(), "--campaign", c2.string()}).exit_code == 2);
    CHECK(run_cli({"export", c2.string()}).exit_code == 2);  // --out is required
    auto help = run_cli({"--help"});
    CHECK(has(help.out, "export"));
    CHECK(has(help.out, "import"));
}

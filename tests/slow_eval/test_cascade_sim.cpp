// The cascade on the real simulator (npu-sim's npuc) against the adversarial kernels of
// tests/data/adversarial: each one rejected with the right reason recorded in the store.
// Skips cleanly when npuc is not built (${NPUOPT_BUILD_DIR}/npu-sim/1.0/bin/npuc).

#include "config/cost_model_config.hpp"
#include "../eval/test_cascade_fixture.hpp"

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "config/target_loader.hpp"
#include "eval/speed_of_light.hpp"

using namespace npuopt::eval;
namespace fs = std::filesystem;

namespace {

const fs::path k_npuc = fs::path(NPUOPT_BUILD_DIR) / "npu-sim" / "1.0" / "bin" / "npuc";
const fs::path k_adversarial = fs::path(NPUOPT_TEST_DATA_DIR) / "adversarial";

bool have_sim() {
    if (fs::exists(k_npuc)) return true;
    MESSAGE("skipped: npuc not built at " << k_npuc.string());
    return false;
}

std::string read_text(const fs::path& path) {
    std::ifstream stream(path);
    std::stringstream buffer;
    buffer << stream.rdbuf();
    return buffer.str();
}

/// A campaign on npu-sim: the real target.yaml, a kernel-binary cache the sandbox may write, and
/// a profile copy without launch overhead (tests may read profiles; src/ never does).
struct SimCampaign {
    cascade_test::TempDir dir{"slow-cascade"};
    fs::path cache = fs::path(NPUOPT_BUILD_DIR) / "test-tmp" / "npuc-cache";
    npuopt::store::CampaignStore store = npuopt::store::CampaignStore::open(dir.path() / "campaign.db");
    npuopt::store::Database kb_database = npuopt::store::Database::open(dir.path() / "kb.db");
    npuopt::store::KnowledgeStore kb_store{kb_database};
    std::int64_t kb_version_id = kb_store.toolchain_version_id("npu-sim", "npuc", "1.0.0");
    npuopt::knowledge::RuleBook rules{kb_store, "npu-sim", "1.0.0"};
    std::unique_ptr<npuopt::target::Toolchain> toolchain;
    npuopt::config::KernelSpec spec;

    SimCampaign() {
        fs::create_directories(cache);
        std::string profile = read_text(fs::path(NPUOPT_SOURCE_DIR) / "tools" / "npu-sim" / "profiles" / "default.profile");
        profile = std::regex_replace(profile, std::regex("launch_overhead_ms *= *[0-9.]+"), "launch_overhead_ms = 0");
        std::ofstream(dir.path() / "test.profile") << profile;
        const fs::path knowledge = fs::path(NPUOPT_SOURCE_DIR) / "knowledge" / "npu-sim";
        auto target = npuopt::config::load_target_config(knowledge / "target.yaml");
        target.toolchain.bin = k_npuc.string();
        target.toolchain.env["NPUC_CACHE_DIR"] = cache.string();
        target.toolchain.env["NPU_SIM_PROFILE"] = (dir.path() / "test.profile").string();
        npuopt::proc::SandboxPolicy sandbox;
        sandbox.required = false;
        sandbox.writable_paths = {cache};
        sandbox.read_only_paths = {dir.path()};
        toolchain = std::make_unique<npuopt::target::Toolchain>(target, sandbox);
        const auto kernels = npuopt::config::load_kernels_config(target.kernels_file, target.templates_dir);
        for (const auto& kernel : kernels.kernels) {
            if (kernel.name == "attention_output") spec = kernel;
        }
        REQUIRE(spec.name == "attention_output");
    }

    KernelContext kernel() const {
        KernelContext context;
        context.spec = spec;
        context.shape = {{"hidden", 256}, {"q_heads", 2}, {"head_dim", 64}};
        context.min_bytes_moved = kernel_min_bytes(spec, context.shape);
        return context;
    }

    Candidate design(const fs::path& file, const std::string& name) {
        npuopt::store::DesignRecord record;
        record.content_hash = "sim-" + name;
        record.target = "npu-sim";
        record.kernel = "attention_output";
        record.shape = "head_dim=64,hidden=256,q_heads=2";
        record.template_name = name;
        Candidate candidate;
        candidate.design_id = store.record_design(record);
        candidate.content_hash = record.content_hash;
        candidate.kernel = "attention_output";
        candidate.source_file = file;
        return candidate;
    }

    Champion baseline() {
        return Champion{design(fs::path(NPUOPT_SOURCE_DIR) / "dsl_templates" / "npu-sim" / "baseline_attention_output.rs",
                               "baseline"),
                        24000};
    }
};

CascadeConfig sim_config(std::vector<std::string> extra_args = {}) {
    CascadeConfig config;
    config.acceptance.calibration_paths = 4000;
    config.seed = 11;
    // npu-sim's --no-poison leaves seed 0's results in the outputs: the priming launch is seed 0,
    // so "the previous run" is the priming run, as on a device that does not clear its outputs
    if (std::find(extra_args.begin(), extra_args.end(), "--no-poison") != extra_args.end()) config.priming_seed = 0;
    config.run_extra_args = std::move(extra_args);
    return config;
}

/// Evaluate an adversarial kernel against the baseline; returns its last stored row.
npuopt::store::EvaluationRecord evaluate_adversarial(const std::string& file, std::vector<std::string> extra_args = {}) {
    SimCampaign campaign;
    Cascade cascade(*campaign.toolchain, campaign.store, &campaign.rules, nullptr, sim_config(std::move(extra_args)));
    const Candidate candidate = campaign.design(k_adversarial / file, file);
    const Outcome outcome = cascade.evaluate(candidate, campaign.baseline(), campaign.kernel());
    CHECK_FALSE(outcome.accepted);
    const auto rows = campaign.store.list_evaluations(candidate.design_id);
    REQUIRE_FALSE(rows.empty());
    return rows.back();
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("npu-sim: a kernel returning the previous run's output (--no-poison) is rejected as leftovers") {
    if (!have_sim()) return;
    const auto row = evaluate_adversarial("leftovers.rs", {"--no-poison"});
    INFO(row.reason);
    CHECK(row.stage == "correctness");
    CHECK(row.verdict == "fail");
    CHECK(starts_with(row.reason, "leftovers:"));
}

TEST_CASE("npu-sim: the same kernel with poisoned outputs fails as non-finite") {
    if (!have_sim()) return;
    const auto row = evaluate_adversarial("leftovers.rs");
    INFO(row.reason);
    CHECK(row.stage == "correctness");
    CHECK(starts_with(row.reason, "nonfinite:"));
}

TEST_CASE("npu-sim: a kernel that ignores its input is rejected as input independent") {
    if (!have_sim()) return;
    const auto row = evaluate_adversarial("ignores_input.rs");
    INFO(row.reason);
    CHECK(row.stage == "correctness");
    CHECK(starts_with(row.reason, "input_independent:"));
}

TEST_CASE("npu-sim: a kernel writing non-finite values is rejected as nonfinite") {
    if (!have_sim()) return;
    const auto row = evaluate_adversarial("nonfinite.rs");
    INFO(row.reason);
    CHECK(row.stage == "correctness");
    CHECK(starts_with(row.reason, "nonfinite:"));
}

TEST_CASE("npu-sim: an all-zero output is rejected for its magnitude") {
    if (!have_sim()) return;
    const auto row = evaluate_adversarial("all_zeros.rs");
    INFO(row.reason);
    CHECK(row.stage == "correctness");
    CHECK(starts_with(row.reason, "all_zero:"));
}

TEST_CASE("npu-sim: an honest first design passes and becomes champion / below the speed of light it is suspect") {
    if (!have_sim()) return;
    SimCampaign campaign;
    {
        Cascade cascade(*campaign.toolchain, campaign.store, &campaign.rules, nullptr, sim_config());
        const Outcome outcome = cascade.evaluate(campaign.baseline().candidate, std::nullopt, campaign.kernel());
        INFO(outcome.final_reason);
        CHECK(outcome.correct);
        CHECK(outcome.accepted);
    }
    // A hardware model that believes in 1 byte/cycle puts the bound above the baseline's cycles.
    npuopt::knowledge::HardwareModel model;
    model.set("sustained_bytes_per_cycle", 1.0);
    model.cost_model = std::make_shared<npuopt::config::CostModelSpec>(npuopt::config::load_cost_model_config(std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/cost_model.yaml"));
    Cascade cascade(*campaign.toolchain, campaign.store, &campaign.rules, &model, sim_config());
    const auto kernel = campaign.kernel();
    CHECK(cascade.speed_of_light_cycles(kernel) > 30000.0);
    const Candidate candidate = campaign.design(
        fs::path(NPUOPT_SOURCE_DIR) / "dsl_templates" / "npu-sim" / "baseline_attention_output.rs", "baseline-again");
    const Outcome outcome = cascade.evaluate(candidate, std::nullopt, kernel);
    CHECK_FALSE(outcome.accepted);
    const auto rows = campaign.store.list_evaluations(candidate.design_id);
    REQUIRE_FALSE(rows.empty());
    INFO(rows.back().reason);
    CHECK(rows.back().verdict == "suspect");
    CHECK(starts_with(rows.back().reason, "speed_of_light:"));
}

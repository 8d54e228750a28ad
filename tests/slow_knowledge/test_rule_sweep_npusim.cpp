// Rule precision on a small sweep through the real npuc 1.0: rule probes of
// tools/bench/rules_probes (each on both sides of a legality limit, declaring the quantity the
// diagnostic carries) and the defaults of two design templates, met in grid order, so that some
// designs the toolchain accepts come before the diagnostic that would have read as a rule
// rejecting them. No enforced rule may reject an accepted design. Skips when npu-sim is not built.

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>

#include "config/target_loader.hpp"
#include "config/template_config.hpp"
#include "knowledge/knowledge_base.hpp"
#include "knowledge/rule_sweep.hpp"
#include "search/design.hpp"
#include "store/database.hpp"
#include "target/toolchain.hpp"

namespace fs = std::filesystem;
using namespace npuopt;

namespace {

class TempDir {
public:
    TempDir() {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / "rule-sweep-npusim-XXXXXX").string();
        REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        m_path = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(m_path, ignored);
    }
    const fs::path& path() const { return m_path; }

private:
    fs::path m_path;
};

bool has_npuc(const fs::path& root) { return ::access((root / "1.0/bin/npuc").c_str(), X_OK) == 0; }

/// The npu-sim directory holding 1.0/bin/npuc: $NPUOPT_NPUSIM_DIR, this build's, or the most
/// recently built one of the source tree's build*/ (an older build may lack newer DSL calls).
std::optional<fs::path> find_npusim() {
    if (const char* env = std::getenv("NPUOPT_NPUSIM_DIR"); env != nullptr && has_npuc(env)) return fs::path(env);
    if (has_npuc(fs::path(NPUOPT_BUILD_DIR) / "npu-sim")) return fs::path(NPUOPT_BUILD_DIR) / "npu-sim";
    std::optional<fs::path> newest;
    fs::file_time_type newest_time{};
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(NPUOPT_SOURCE_DIR, error)) {
        const fs::path candidate = entry.path() / "npu-sim";
        if (!entry.is_directory() || !entry.path().filename().string().starts_with("build") || !has_npuc(candidate)) {
            continue;
        }
        const auto time = fs::last_write_time(candidate / "1.0/bin/npuc", error);
        if (!error && (!newest || time > newest_time)) {
            newest = candidate;
            newest_time = time;
        }
    }
    return newest;
}

/// Every assignment of a template's grid whose values of `only` are in the given sets.
std::vector<search::Assignment> grid(const search::Template& tmpl, const std::map<std::string, std::set<double>>& only) {
    std::vector<search::Assignment> result = {{}};
    for (const auto& param : tmpl.params()) {
        std::vector<search::Assignment> next;
        for (const auto& partial : result) {
            for (double value : param.values) {
                auto filter = only.find(param.name);
                if (filter != only.end() && !filter->second.contains(value)) continue;
                auto assignment = partial;
                assignment[param.name] = value;
                next.push_back(assignment);
            }
        }
        result = std::move(next);
    }
    return result;
}

}  // namespace

TEST_CASE("rule sweep on npuc 1.0: no enforced rule rejects a design the toolchain accepts") {
    auto npusim = find_npusim();
    if (!npusim) {
        MESSAGE("SKIPPED: npu-sim is not built (no build*/npu-sim/1.0/bin/npuc)");
        return;
    }
    TempDir dir;
    auto target = config::load_target_config(fs::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/target.yaml");
    target.toolchain.search_paths = {*npusim / "1.0" / "bin"};
    const auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
    auto kernel = [&](const std::string& name) {
        for (const auto& spec : kernels.kernels) {
            if (spec.name == name) return spec;
        }
        FAIL("no kernel " << name);
        return config::KernelSpec{};
    };

    // Probes in grid order: pitch 64 on 64-column tiles is accepted before pitch 64 on 128-column
    // tiles is rejected ("pitch smaller than a row", limit 128) — a limit seen only once.
    const std::vector<std::pair<std::string, std::map<std::string, std::set<double>>>> probes = {
        {"rp_pitch", {{"COLS", {64, 128}}}},
        {"rp_dm_bytes", {}},
        {"rp_packet", {}},
        {"rp_pass_rows", {}},
    };
    std::vector<knowledge::SweepDesign> designs;
    auto add = [&](const search::Design& design, const std::string& group) {
        knowledge::SweepDesign sweep{design.label(), group, dir.path() / (design.content_hash.substr(0, 16) + ".rs"),
                                     design.content_hash, design.quantities};
        for (const auto& [name, value] : design.features) sweep.declared.emplace(name, value);
        std::ofstream(sweep.file) << design.source;
        designs.push_back(std::move(sweep));
    };
    const fs::path probes_dir = fs::path(NPUOPT_SOURCE_DIR) / "tools/bench/rules_probes";
    for (const auto& [name, only] : probes) {
        auto spec = config::load_template_config(probes_dir / (name + ".template.yaml"));
        auto tmpl = search::Template::load(spec, kernel(spec.kernel), target.name);
        for (const auto& assignment : grid(*tmpl, only)) add(tmpl->instantiate(assignment), "probe");
    }
    for (const char* name : {"qkv_streamed", "ff_streamed"}) {
        auto spec = config::load_template_config(target.templates_dir / (std::string(name) + ".template.yaml"));
        auto tmpl = search::Template::load(spec, kernel(spec.kernel), target.name);
        add(tmpl->instantiate(tmpl->default_assignment()), "template");
    }

    proc::SandboxPolicy sandbox;
    sandbox.enabled = true;
    sandbox.required = false;
    target::Toolchain toolchain(target, sandbox);
    toolchain.set_cache_dir(dir.path() / "cache");
    fs::create_directories(dir.path() / "cache");
    auto version = toolchain.version();
    REQUIRE_MESSAGE(version.call.status == target::CallStatus::ok, version.call.message);

    auto database = store::Database::open(dir.path() / "kb.db");
    knowledge::KnowledgeBase kb(database, target.name, target.docs_dir);
    kb.set_current_version(version.name, version.version);
    knowledge::RuleBook rules = kb.rules();
    knowledge::RuleSweepOptions options;
    options.parallel = 2;
    const auto report = knowledge::run_rule_sweep(toolchain, rules, designs, options);

    int rejected = 0;
    for (const auto& result : report.results) {
        CHECK_MESSAGE(!result.error, result.label << ": " << result.status);
        if (!result.accepted && !result.error) ++rejected;
    }
    const auto& audit = report.audit;
    MESSAGE(designs.size() << " designs, " << report.accepted.size() << " accepted, " << rejected << " rejected in "
                           << report.wall_secs << " s; " << audit.active << " enforced rules (" << audit.active_checkable
                           << " machine-checked, " << audit.active_exercised << " exercised), " << audit.demoted
                           << " demoted\n"
                           << rules.render_text());
    REQUIRE(report.accepted.size() >= 10);
    REQUIRE(rejected >= 6);  // 7 with npuc 1.0: pitch 64 < 128, DM 524544 and 614400, packets 8192 and 16384, rows 12 and 20
    for (const auto& row : audit.rows) {
        if (row.active && !row.rejects.empty()) {
            FAIL_CHECK("imprecise: " << knowledge::render_rule(row.rule) << " rejects accepted " << row.rejects.front());
        }
    }
    CHECK(audit.active_imprecise == 0);
    CHECK(audit.precision == doctest::Approx(1.0));
    // Not vacuous: the bounds the probes exercise are enforced and read declared quantities.
    CHECK(audit.active_exercised >= 3);
    for (const char* code : {"E0101", "E0201", "E0301", "E0303"}) CHECK_MESSAGE(audit.codes.contains(code), code);
    // The pitch bound read off one design was contradicted by an earlier accepted design: demoted.
    bool pitch_demoted = false;
    for (const auto& row : audit.rows) pitch_demoted = pitch_demoted || (row.rule.code == "E0303" && row.rule.status == "demoted");
    CHECK(pitch_demoted);
}

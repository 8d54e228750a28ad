#include "rules_bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "config/microbench_config.hpp"
#include "config/target_loader.hpp"
#include "config/template_config.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "knowledge/knowledge_base.hpp"
#include "knowledge/microbench.hpp"
#include "knowledge/rule_sweep.hpp"
#include "search/design.hpp"
#include "store/database.hpp"
#include "target/toolchain.hpp"

namespace npuopt::bench {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(ErrorKind::io, fmt::format("cannot read {}", file.string()));
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

void write_text(const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream out(file, std::ios::binary);
    out << text;
    if (!out) throw Error(ErrorKind::io, fmt::format("cannot write {}", file.string()));
}

/// Every assignment of the cartesian product of the params' domains.
std::vector<search::Assignment> full_grid(const search::Template& tmpl) {
    std::vector<search::Assignment> grid = {{}};
    for (const auto& param : tmpl.params()) {
        std::vector<search::Assignment> next;
        for (const auto& partial : grid) {
            for (double value : param.values) {
                search::Assignment assignment = partial;
                assignment[param.name] = value;
                next.push_back(std::move(assignment));
            }
        }
        grid = std::move(next);
    }
    return grid;
}

/// The default, then each param over its domain with the others at their defaults.
std::vector<search::Assignment> one_at_a_time(const search::Template& tmpl) {
    const search::Assignment defaults = tmpl.default_assignment();
    std::vector<search::Assignment> grid = {defaults};
    for (const auto& param : tmpl.params()) {
        for (double value : param.values) {
            if (value == param.default_value) continue;
            search::Assignment assignment = defaults;
            assignment[param.name] = value;
            grid.push_back(std::move(assignment));
        }
    }
    return grid;
}

struct DesignSet {
    std::vector<knowledge::SweepDesign> designs;
    std::map<std::string, int> skipped;  ///< why designs were not built, with counts
};

knowledge::SweepDesign from_design(const search::Design& design, const std::string& group, const fs::path& work_dir) {
    knowledge::SweepDesign sweep;
    sweep.label = design.label();
    sweep.group = group;
    sweep.design_hash = design.content_hash;
    sweep.file = work_dir / group / (design.content_hash.substr(0, 16) + design.source_extension);
    write_text(sweep.file, design.source);
    sweep.declared = design.quantities;
    for (const auto& [name, value] : design.features) sweep.declared.emplace(name, value);
    return sweep;
}

knowledge::SweepDesign from_source(const std::string& label, const std::string& group, const std::string& source,
                                   const fs::path& work_dir) {
    knowledge::SweepDesign sweep;
    sweep.label = label;
    sweep.group = group;
    sweep.design_hash = content_hash(source);
    sweep.file = work_dir / group / (sweep.design_hash.substr(0, 16) + ".rs");
    write_text(sweep.file, source);
    return sweep;
}

DesignSet build_designs(const config::TargetConfig& target, const RulesBenchOptions& options, const fs::path& work_dir) {
    DesignSet set;
    const auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
    auto kernel_of = [&](const std::string& name) -> const config::KernelSpec* {
        for (const auto& kernel : kernels.kernels) {
            if (kernel.name == name) return &kernel;
        }
        return nullptr;
    };

    // Templates: the design templates (grids) and the rule probes (every point).
    const fs::path probes_dir = options.source_dir / "tools" / "bench" / "rules_probes";
    for (const auto& [dir, group] : {std::pair{target.templates_dir, std::string("template")},
                                     std::pair{probes_dir, std::string("probe")}}) {
        std::vector<std::string> errors;
        for (const auto& spec : config::load_template_dir(dir, &errors)) {
            const config::KernelSpec* kernel = kernel_of(spec.kernel);
            if (kernel == nullptr) {
                set.skipped[fmt::format("template {}: unknown kernel {}", spec.name, spec.kernel)]++;
                continue;
            }
            auto tmpl = search::Template::load(spec, *kernel, target.name);
            std::vector<search::Assignment> grid;
            if (group == "probe" || tmpl->domain_size() <= static_cast<double>(options.max_grid)) {
                grid = full_grid(*tmpl);
            } else {
                grid = options.quick ? std::vector<search::Assignment>{tmpl->default_assignment()} : one_at_a_time(*tmpl);
            }
            for (const auto& assignment : grid) {
                if (tmpl->check_constraints(assignment)) {
                    set.skipped["outside a template's constraints (not a design)"]++;
                    continue;
                }
                set.designs.push_back(from_design(tmpl->instantiate(assignment), group, work_dir));
            }
        }
        for (const auto& error : errors) set.skipped[error]++;
    }

    // The baselines (accepted designs that declare nothing) and two mutations of each: the
    // kernel registered under a name the toolchain does not know, and a truncated file.
    for (const auto& kernel : kernels.kernels) {
        auto baseline = search::Template::baseline(kernel, target.name);
        const search::Design design = baseline->instantiate({});
        set.designs.push_back(from_design(design, "baseline", work_dir));
        const std::string registration = fmt::format("{} =>", kernel.name);
        if (auto pos = design.source.rfind(registration); pos != std::string::npos) {
            std::string renamed = design.source;
            renamed.replace(pos, kernel.name.size(), kernel.name + "_renamed");
            set.designs.push_back(from_source(design.label() + "[kernel renamed]", "mutation", renamed, work_dir));
        }
        if (auto pos = design.source.rfind('}'); pos != std::string::npos) {
            std::string truncated = design.source.substr(0, pos);
            set.designs.push_back(from_source(design.label() + "[truncated]", "mutation", truncated, work_dir));
        }
    }

    // The simulator's illegal fixtures: one kernel per legality rule (the benchmark may read the simulator).
    std::vector<fs::path> fixtures;
    for (const auto& entry : fs::directory_iterator(options.source_dir / "tools" / "npu-sim" / "fixtures" / "illegal")) {
        if (entry.path().extension() == ".rs") fixtures.push_back(entry.path());
    }
    std::sort(fixtures.begin(), fixtures.end());
    for (const auto& fixture : fixtures) {
        set.designs.push_back(from_source(fixture.stem().string(), "fixture", read_text(fixture), work_dir));
    }

    // The microbenchmark kernels: the first and last point of every probe's sweep.
    const auto suite = config::load_microbench_suite(target.microbench_dir / "suite.yaml");
    for (const auto& probe : suite.probes) {
        const auto points = config::expand_probe_sweep(probe);
        std::vector<config::ProbeParams> chosen;
        if (!points.empty()) chosen.push_back(points.front());
        if (points.size() > 1 && !options.quick) chosen.push_back(points.back());
        const std::string text = read_text(probe.file);
        for (const auto& point : chosen) {
            std::map<std::string, std::string> values;
            std::vector<std::string> parts;
            for (const auto& [name, value] : point) {
                values[name] = std::to_string(value);
                parts.push_back(fmt::format("{}={}", name, value));
            }
            values["kernel"] = probe.kernel.empty() ? suite.kernel : probe.kernel;
            const std::string source = knowledge::instantiate_probe(text, values, probe.file);
            set.designs.push_back(from_source(fmt::format("{}{{{}}}", probe.name, fmt::join(parts, ",")), "microbench",
                                              source, work_dir));
        }
    }

    // A campaign meets designs in no particular order: a fixed shuffle, so that rules are mined
    // both before and after the accepted designs that could contradict them.
    std::mt19937 rng(20261130);
    std::shuffle(set.designs.begin(), set.designs.end(), rng);
    return set;
}

nlohmann::json audit_json(const knowledge::RuleAudit& audit) {
    nlohmann::json imprecise = nlohmann::json::array();
    nlohmann::json rules = nlohmann::json::array();
    for (const auto& row : audit.rows) {
        nlohmann::json entry = {{"code", row.rule.code},
                                {"kind", row.rule.kind},
                                {"status", row.rule.status},
                                {"enforced", row.active},
                                {"machine_checked", row.checkable},
                                {"exercised", row.exercised},
                                {"evidence", row.rule.evidence_count},
                                {"counter_evidence", row.rule.counter_count},
                                {"text", knowledge::render_rule(row.rule)},
                                {"rejects_accepted", row.rejects.size()}};
        if (!row.rejects.empty()) {
            nlohmann::json examples = nlohmann::json::array();
            for (std::size_t idx = 0; idx < row.rejects.size() && idx < 3; ++idx) examples.push_back(row.rejects[idx]);
            entry["accepted_designs_rejected"] = examples;
        }
        if (row.active && !row.rejects.empty()) {
            imprecise.push_back({{"rule", entry["text"]}, {"accepted_designs_rejected", entry["accepted_designs_rejected"]}});
        }
        rules.push_back(std::move(entry));
    }
    return {{"rules", audit.rules},
            {"enforced", audit.active},
            {"enforced_machine_checked", audit.active_checkable},
            {"enforced_exercised", audit.active_exercised},
            {"enforced_imprecise", audit.active_imprecise},
            {"demoted", audit.demoted},
            {"mined_machine_checked", audit.mined_checkable},
            {"mined_imprecise", audit.mined_imprecise},
            {"precision", audit.precision},
            {"imprecise", imprecise},
            {"rule_list", rules}};
}

std::vector<std::string> sorted(const std::set<std::string>& codes) { return {codes.begin(), codes.end()}; }

}  // namespace

std::vector<std::string> documented_codes(const fs::path& api_md) {
    std::istringstream lines(read_text(api_md));
    std::set<std::string> codes;
    bool in_table = false;
    const std::regex code_pattern(R"(E[0-9]{4})");
    for (std::string line; std::getline(lines, line);) {
        if (line.starts_with("## ")) in_table = line.find("Diagnostics") != std::string::npos;
        if (!in_table || !line.starts_with("| E")) continue;
        const std::string first_cell = line.substr(1, line.find('|', 1) - 1);
        for (std::sregex_iterator it(first_cell.begin(), first_cell.end(), code_pattern), end; it != end; ++it) {
            codes.insert(it->str());
        }
    }
    if (codes.empty()) throw Error(ErrorKind::invalid_input, fmt::format("no diagnostic codes found in {}", api_md.string()));
    return {codes.begin(), codes.end()};
}

nlohmann::json run_rules_bench(const config::TargetConfig& target, const RulesBenchOptions& options) {
    const auto started = std::chrono::steady_clock::now();
    const auto documented = documented_codes(options.source_dir / "tools" / "npu-sim" / "API.md");
    const std::set<std::string> documented_set(documented.begin(), documented.end());

    // Outside /tmp: the sandbox gives each toolchain call a private /tmp.
    const fs::path work_dir = fs::path(NPUOPT_BUILD_DIR) / "bench-rules" / std::to_string(::getpid());
    fs::remove_all(work_dir);
    fs::create_directories(work_dir);
    const DesignSet set = build_designs(target, options, work_dir);

    nlohmann::json releases = nlohmann::json::array();
    std::set<std::string> union_codes;
    std::set<std::string> union_emitted;
    bool all_precise = true;
    for (std::size_t release = 0; release < options.npucs.size(); ++release) {
        config::TargetConfig release_target = target;
        release_target.toolchain.bin = options.npucs[release].string();
        proc::SandboxPolicy sandbox;
        sandbox.enabled = true;
        sandbox.required = false;
        target::Toolchain toolchain(release_target, sandbox);
        const fs::path cache = work_dir / fmt::format("cache-{}", release);
        fs::create_directories(cache);
        toolchain.set_cache_dir(cache);
        const auto version = toolchain.version();
        if (version.call.status != target::CallStatus::ok || version.version.empty()) {
            throw Error(ErrorKind::toolchain, fmt::format("{} --version failed: {}", options.npucs[release].string(),
                                                          version.call.message));
        }
        // The first release gets the whole sweep; later ones the designs that are not template grids.
        std::vector<knowledge::SweepDesign> designs;
        for (const auto& design : set.designs) {
            if (release == 0 || design.group != "template") designs.push_back(design);
        }

        auto database = store::Database::open(work_dir / fmt::format("rules-{}.db", version.version));
        knowledge::KnowledgeBase kb(database, target.name, target.docs_dir);
        kb.set_current_version(version.name, version.version);
        knowledge::RuleBook rules = kb.rules();
        knowledge::RuleSweepOptions sweep_options;
        sweep_options.parallel = options.parallel;
        if (options.progress) {
            sweep_options.on_result = [&](const knowledge::SweepResult& result) {
                std::cerr << fmt::format("  rules {} {:<10} {:<48} {:<9} {}\n", version.version, result.group,
                                         result.label.substr(0, 48),
                                         result.accepted ? "accepted" : (result.error ? result.status : "rejected"),
                                         fmt::join(result.codes, " "));
            };
        }
        const auto report = knowledge::run_rule_sweep(toolchain, rules, designs, sweep_options);

        std::map<std::string, std::map<std::string, int>> groups;
        std::set<std::string> emitted;
        int accepted = 0;
        int rejected = 0;
        int errors = 0;
        for (const auto& result : report.results) {
            auto& group = groups[result.group];
            group["designs"]++;
            if (result.accepted) {
                ++accepted;
                group["accepted"]++;
            } else if (result.error) {
                ++errors;
                group["errors"]++;
            } else {
                ++rejected;
                group["rejected"]++;
            }
            for (const auto& code : result.codes) emitted.insert(code);
        }
        std::set<std::string> covered;
        for (const auto& code : report.audit.codes) {
            if (documented_set.contains(code)) covered.insert(code);
        }
        std::vector<std::string> missing;
        for (const auto& code : documented) {
            if (!covered.contains(code)) missing.push_back(code);
        }
        std::set<std::string> emitted_without_rule;
        for (const auto& code : emitted) {
            if (!report.audit.codes.contains(code)) emitted_without_rule.insert(code);
        }
        union_codes.insert(covered.begin(), covered.end());
        union_emitted.insert(emitted.begin(), emitted.end());
        if (report.audit.active_imprecise > 0) all_precise = false;

        nlohmann::json entry = audit_json(report.audit);
        entry["toolchain"] = fmt::format("{} {}", version.name, version.version);
        entry["npuc"] = options.npucs[release].string();
        entry["designs"] = report.results.size();
        entry["accepted"] = accepted;
        entry["rejected"] = rejected;
        entry["errors"] = errors;
        entry["accepted_declaring_quantities"] =
            std::count_if(report.accepted.begin(), report.accepted.end(), [](const auto& d) { return !d.quantities.empty(); });
        entry["groups"] = groups;
        entry["codes_documented"] = documented.size();
        entry["codes_emitted"] = sorted(emitted);
        entry["codes_with_rule"] = sorted(covered);
        entry["codes_with_enforced_rule"] = sorted(report.audit.codes_active);
        entry["codes_with_machine_checked_rule"] = sorted(report.audit.codes_checkable);
        entry["codes_without_rule"] = missing;
        entry["codes_emitted_without_rule"] = sorted(emitted_without_rule);
        entry["coverage"] = static_cast<double>(covered.size()) / static_cast<double>(documented.size());
        entry["sweep_secs"] = report.wall_secs;
        releases.push_back(std::move(entry));
    }
    std::vector<std::string> union_missing;
    for (const auto& code : documented) {
        if (!union_codes.contains(code)) union_missing.push_back(code);
    }
    nlohmann::json skipped = nlohmann::json::object();
    for (const auto& [why, count] : set.skipped) skipped[why] = count;
    nlohmann::json section = {
        {"designs_built", set.designs.size()},
        {"designs_skipped", skipped},
        {"codes_documented", documented},
        {"releases", releases},
        {"precision_goal_met", all_precise},
        {"coverage_all_releases", static_cast<double>(union_codes.size()) / static_cast<double>(documented.size())},
        {"codes_with_rule_all_releases", sorted(union_codes)},
        {"codes_without_rule_all_releases", union_missing},
        {"secs", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()},
        {"work_dir", work_dir.string()},
    };
    std::error_code ignored;
    fs::remove_all(work_dir, ignored);
    return section;
}

std::string rules_bench_text(const nlohmann::json& section) {
    std::string text = fmt::format("rules: sweep of {} designs in {:.1f} s\n", section["designs_built"].get<std::size_t>(),
                                   section["secs"].get<double>());
    for (const auto& release : section["releases"]) {
        text += fmt::format(
            "  {}: {} designs ({} accepted, {} rejected, {} without verdict)\n"
            "    precision {:.1f}%: {} of {} enforced rules reject no accepted design ({} machine-checked, {} of them "
            "exercised by declared quantities; {} demoted during the sweep; as mined {} of {} machine-checked rules "
            "rejected an accepted design)\n"
            "    coverage {:.1f}%: {} of {} documented diagnostic codes have a rule; without: {}\n",
            release["toolchain"].get<std::string>(), release["designs"].get<std::size_t>(), release["accepted"].get<int>(),
            release["rejected"].get<int>(), release["errors"].get<int>(), 100.0 * release["precision"].get<double>(),
            release["enforced"].get<int>() - release["enforced_imprecise"].get<int>(), release["enforced"].get<int>(),
            release["enforced_machine_checked"].get<int>(), release["enforced_exercised"].get<int>(),
            release["demoted"].get<int>(), release["mined_imprecise"].get<int>(), release["mined_machine_checked"].get<int>(),
            100.0 * release["coverage"].get<double>(), release["codes_with_rule"].size(),
            release["codes_documented"].get<std::size_t>(), release["codes_without_rule"].dump());
        for (const auto& rule : release["rule_list"]) {
            if (rule["status"] == "demoted" && rule.contains("accepted_designs_rejected")) {
                text += fmt::format("    demoted: {} (contradicted by accepted {})\n", rule["text"].get<std::string>(),
                                    rule["accepted_designs_rejected"].dump());
            }
        }
        for (const auto& bad : release["imprecise"]) {
            text += fmt::format("    IMPRECISE: {} rejects {}\n", bad["rule"].get<std::string>(),
                                bad["accepted_designs_rejected"].dump());
        }
    }
    text += fmt::format("  all releases: coverage {:.1f}%, without a rule: {}; precision goal {}\n",
                        100.0 * section["coverage_all_releases"].get<double>(),
                        section["codes_without_rule_all_releases"].dump(),
                        section["precision_goal_met"].get<bool>() ? "met (100%)" : "MISSED");
    return text;
}

}  // namespace npuopt::bench

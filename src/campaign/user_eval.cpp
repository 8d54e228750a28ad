#include "campaign/user_eval.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "eval/seed_stream.hpp"
#include "eval/speed_of_light.hpp"
#include "knowledge/rules.hpp"
#include "search/design.hpp"
#include "store/knowledge_store.hpp"
#include "store/tree_store.hpp"

namespace npuopt::campaign {

namespace fs = std::filesystem;

namespace {

constexpr std::uintmax_t k_max_source_bytes = 4U << 20;

std::string read_source(const fs::path& file, const char* what) {
    std::error_code error_code;
    if (!fs::is_regular_file(file, error_code)) {
        throw Error(ErrorKind::invalid_input, fmt::format("eval: {} {} is not a readable file", what, file.string()));
    }
    const auto size = fs::file_size(file, error_code);
    if (!error_code && size > k_max_source_bytes) {
        throw Error(ErrorKind::invalid_input, fmt::format("eval: {} {} has {} bytes; a kernel source is at most {}",
                                                          what, file.string(), size, k_max_source_bytes));
    }
    std::ifstream stream(file, std::ios::binary);
    std::ostringstream text;
    text << stream.rdbuf();
    if (!stream && !stream.eof()) {
        throw Error(ErrorKind::invalid_input, fmt::format("eval: cannot read {} {}", what, file.string()));
    }
    return text.str();
}

/// The source written into the campaign's designs/ folder: the toolchain sees this copy only,
/// never the folder the user's file lives in.
fs::path materialise(const fs::path& campaign_dir, const std::string& kernel, const std::string& content_hash,
                     const std::string& extension, const std::string& source) {
    const auto dir = campaign_dir / "designs";
    fs::create_directories(dir);
    const auto file = dir / (kernel + "-" + content_hash.substr(0, 16) + extension);
    auto temporary = file;
    temporary += ".tmp";
    {
        std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
        out << source;
        if (!out) throw Error(ErrorKind::io, fmt::format("{}: cannot write the design source", temporary.string()));
    }
    fs::rename(temporary, file);
    return file;
}

struct Recorded {
    eval::Candidate candidate;
    std::string template_name;
};

/// Record a source as a design of `kernel` (idempotent by content hash) and write it out.
Recorded record_source(Workspace& workspace, const config::KernelSpec& spec, const std::string& source,
                       const std::string& template_name, const std::string& extension) {
    const std::string shape_text = target::format_shape(spec.shape);
    store::DesignRecord record;
    record.content_hash = search::design_hash(workspace.target.name, spec.name, shape_text, source);
    record.target = workspace.target.name;
    record.kernel = spec.name;
    record.shape = shape_text;
    record.template_name = template_name;
    record.source = source;
    Recorded recorded;
    recorded.candidate.design_id = workspace.store->record_design(record);
    recorded.candidate.content_hash = record.content_hash;
    recorded.candidate.kernel = spec.name;
    recorded.candidate.source_file = materialise(workspace.dir, spec.name, record.content_hash, extension, source);
    const auto stored = workspace.store->find_design(recorded.candidate.design_id);
    recorded.template_name = stored ? stored->template_name : template_name;
    return recorded;
}

std::string extension_of(const fs::path& file) {
    return file.has_extension() ? file.extension().string() : std::string(".rs");
}

}  // namespace

std::string user_verdict_name(UserVerdict verdict) {
    switch (verdict) {
        case UserVerdict::accepted: return "accepted";
        case UserVerdict::not_faster: return "not_faster";
        case UserVerdict::failed: return "failed";
    }
    return "failed";
}

namespace {

/// The kernel named `name` of the campaign's target; an error that lists the kernels otherwise.
const config::KernelSpec& find_kernel(const Workspace& workspace, const std::string& name) {
    const config::KernelSpec* spec = nullptr;
    std::vector<std::string> names;
    for (const auto& kernel : workspace.kernels.kernels) {
        names.push_back(kernel.name);
        if (kernel.name == name) spec = &kernel;
    }
    if (spec == nullptr) {
        throw Error(ErrorKind::invalid_input, fmt::format("eval: unknown kernel '{}' (kernels of target {}: {})", name,
                                                          workspace.target.name, fmt::join(names, ", ")));
    }
    return *spec;
}

/// What the user's kernel races: the campaign's champion (the baseline when there is none yet),
/// the baseline, or a kernel file; recorded as a design, described in `result.opponent`.
eval::Candidate choose_opponent(Workspace& workspace, const config::KernelSpec* spec, const KernelSetup& setup,
                                const UserEvalOptions& options, const std::optional<std::string>& opponent_source,
                                UserEvalResult& result) {
    std::string against = options.against;
    std::optional<eval::Candidate> opponent;
    if (against == "champion") {
        store::TreeStore trees(workspace.store->database());
        const auto link = trees.current_champion(spec->name);
        const auto design = link ? workspace.store->find_design(link->design_id) : std::nullopt;
        if (design && design->source) {
            eval::Candidate champion;
            champion.design_id = design->id;
            champion.content_hash = design->content_hash;
            champion.kernel = design->kernel;
            champion.source_file = materialise(workspace.dir, design->kernel, design->content_hash,
                                               extension_of(spec->baseline), *design->source);
            opponent = champion;
            result.opponent.kind = "champion";
            result.opponent.label = fmt::format("champion design {} ({})", design->id, design->template_name);
        } else {
            against = "baseline";
            result.opponent.note = "the campaign has no champion for this kernel yet: racing the baseline";
        }
    }
    if (against == "baseline") {
        auto baseline = std::find_if(setup.templates.begin(), setup.templates.end(),
                                     [](const auto& tmpl) { return tmpl->is_baseline(); });
        if (baseline == setup.templates.end()) {
            throw Error(
                ErrorKind::invalid_input,
                fmt::format("eval: kernel '{}' has no loadable baseline ({})", spec->name,
                            setup.template_errors.empty() ? std::string("none declared")
                                                          : fmt::format("{}", fmt::join(setup.template_errors, "; "))));
        }
        const search::Design design = (*baseline)->instantiate({});
        const Recorded recorded =
            record_source(workspace, *spec, design.source, design.template_name, design.source_extension);
        opponent = recorded.candidate;
        result.opponent.kind = "baseline";
        result.opponent.label =
            fmt::format("baseline design {} ({})", recorded.candidate.design_id, spec->baseline.filename().string());
    } else if (opponent_source) {
        const Recorded recorded =
            record_source(workspace, *spec, *opponent_source, "user-opponent", extension_of(options.against));
        opponent = recorded.candidate;
        result.opponent.kind = "file";
        result.opponent.label = fmt::format("{} (design {})", fs::absolute(options.against).lexically_normal().string(),
                                            recorded.candidate.design_id);
    }
    if (!opponent) throw Error(ErrorKind::internal, "eval: no opponent");
    result.opponent.content_hash = opponent->content_hash;
    result.opponent.design_id = opponent->design_id;
    return *opponent;
}

/// The user's verdict from the cascade's outcome: accepted, correct but not shown faster (the
/// race rejected or was inconclusive), or failed; with its one-line summary.
void set_verdict(UserEvalResult& result) {
    const eval::Outcome& outcome = result.outcome;
    const bool raced = !outcome.stages.empty() && outcome.stages.back().stage == eval::StageKind::race;
    const eval::Verdict last_verdict = outcome.stages.empty() ? eval::Verdict::error : outcome.stages.back().verdict;
    if (outcome.accepted) {
        result.verdict = UserVerdict::accepted;
    } else if (raced && (last_verdict == eval::Verdict::reject || last_verdict == eval::Verdict::inconclusive)) {
        result.verdict = UserVerdict::not_faster;
    } else {
        result.verdict = UserVerdict::failed;
    }
    if (result.verdict == UserVerdict::failed) {
        result.summary = fmt::format("failed: {}", outcome.final_reason);
    } else {
        result.summary = fmt::format("{}: speedup {:.4f} [{:.4f}, {:.4f}] over the {} after {} pairs",
                                     result.verdict == UserVerdict::accepted ? "accepted, faster" : "not shown faster",
                                     outcome.speedup.value_or(0.0), outcome.speedup_lower.value_or(0.0),
                                     outcome.speedup_upper.value_or(0.0), result.opponent.kind, outcome.race_pairs);
    }
}

}  // namespace

UserEvalResult evaluate_user_kernel(Workspace& workspace, const UserEvalOptions& options) {
    auto progress = [&](const std::string& line) {
        if (options.on_progress) options.on_progress(line);
    };
    const config::KernelSpec* spec = &find_kernel(workspace, options.kernel);
    const std::string source = read_source(options.file, "kernel file");
    std::optional<std::string> opponent_source;
    if (options.against != "champion" && options.against != "baseline") {
        opponent_source = read_source(options.against, "opponent file (--against)");
    }

    auto setups = campaign::prepare_kernels(workspace.kernels, {spec->name}, workspace.target.templates_dir,
                                            workspace.target.name);
    if (setups.empty()) throw Error(ErrorKind::internal, "eval: the kernel's setup is missing");
    campaign::KernelSetup& setup = setups.front();
    try {
        setup.context.min_bytes_moved = eval::kernel_min_bytes(setup.spec, setup.spec.shape);
    } catch (const Error&) {
        setup.context.min_bytes_moved = 0.0;
    }

    UserEvalResult result;
    result.kernel = spec->name;
    result.file = fs::absolute(options.file).lexically_normal();
    const Recorded candidate = record_source(workspace, *spec, source, "user", extension_of(options.file));
    result.content_hash = candidate.candidate.content_hash;
    result.design_id = candidate.candidate.design_id;

    // ---- the opponent ---------------------------------------------------------------------------
    const eval::Candidate opponent = choose_opponent(workspace, spec, setup, options, opponent_source, result);

    // ---- the cascade, as a campaign runs it, but with every correct candidate raced -------------
    const std::string version = workspace.toolchain_version();
    std::optional<knowledge::HardwareModel> model;
    if (!version.empty()) model = knowledge::load_hardware_model(*workspace.store, workspace.target, version);
    store::KnowledgeStore knowledge_store(workspace.store->database());
    knowledge::RuleBook rules(knowledge_store, workspace.target.name, version);
    eval::CascadeConfig config = cascade_config(workspace);
    config.screen_slack = std::numeric_limits<double>::infinity();
    config.screen_max_ratio = std::numeric_limits<double>::infinity();
    config.quick_reject_ratio = 0.0;
    config.second_look_ratio = 0.0;
    config.clear_win_ratio = 0.0;  // a user's kernel is always raced: the interval is the report
    config.race_min_accept_probability = 0.0;
    eval::Cascade cascade(*workspace.toolchain, *workspace.store, &rules, model ? &*model : nullptr, config);

    std::vector<std::uint64_t> seeds;
    eval::SeedStream seed_stream(config.seed, opponent.content_hash, "eval-opponent " + candidate.candidate.content_hash);
    for (int run_idx = 0; run_idx < std::max(1, options.opponent_runs); ++run_idx) seeds.push_back(seed_stream.next());
    progress(fmt::format("measuring the opponent, {} ({} checked launches)", result.opponent.label, seeds.size()));
    const auto measured = cascade.measure(opponent, setup.context, seeds);
    result.opponent.cycles = measured.cycles;
    result.opponent.cycles_median = measured.cycles_median;
    if (!measured.all_passed || !measured.cycles_median) {
        throw Error(ErrorKind::toolchain,
                    fmt::format("eval: the opponent, {}, failed its own checks ({}); nothing was raced",
                                result.opponent.label, measured.reason));
    }

    progress(fmt::format("evaluating {} (design {}) against it", result.file.string(), result.design_id));
    result.outcome = cascade.evaluate(candidate.candidate, eval::Champion{opponent, *measured.cycles_median}, setup.context);
    set_verdict(result);
    workspace.store->record_event("user_eval", nlohmann::json{{"kernel", result.kernel},
                                                              {"file", result.file.string()},
                                                              {"design_id", result.design_id},
                                                              {"opponent", result.opponent.label},
                                                              {"verdict", user_verdict_name(result.verdict)},
                                                              {"summary", result.summary}}
                                                   .dump());
    return result;
}

nlohmann::json user_eval_json(const UserEvalResult& result) {
    auto optional = [](const std::optional<double>& value) {
        return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
    };
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& stage : result.outcome.stages) {
        stages.push_back({{"stage", eval::stage_name(stage.stage)},
                          {"verdict", eval::verdict_name(stage.verdict)},
                          {"reason", stage.reason},
                          {"secs", stage.secs},
                          {"device_runs", stage.device_runs},
                          {"failed_launches", stage.failed_launches}});
    }
    const bool raced = !result.outcome.stages.empty() && result.outcome.stages.back().stage == eval::StageKind::race;
    nlohmann::json race = nullptr;
    if (raced) {
        race = {{"verdict", eval::verdict_name(result.outcome.stages.back().verdict)},
                {"speedup", optional(result.outcome.speedup)},
                {"interval", {optional(result.outcome.speedup_lower), optional(result.outcome.speedup_upper)}},
                {"pairs", result.outcome.race_pairs},
                {"candidate_cycles_median", optional(result.outcome.cycles_median)},
                {"opponent_cycles_median", optional(result.outcome.champion_cycles_median)}};
    }
    return {{"kernel", result.kernel},
            {"file", result.file.string()},
            {"content_hash", result.content_hash},
            {"design_id", result.design_id},
            {"opponent",
             {{"kind", result.opponent.kind},
              {"label", result.opponent.label},
              {"content_hash", result.opponent.content_hash},
              {"design_id", result.opponent.design_id},
              {"cycles_median", optional(result.opponent.cycles_median)},
              {"cycles", result.opponent.cycles},
              {"note", result.opponent.note}}},
            {"stages", stages},
            {"race", race},
            {"correct", result.outcome.correct},
            {"device_runs", result.outcome.device_runs},
            {"verdict", user_verdict_name(result.verdict)},
            {"summary", result.summary}};
}

std::string render_user_eval_text(const UserEvalResult& result) {
    std::string text = fmt::format("kernel    {}\nfile      {} (design {}, {})\n", result.kernel, result.file.string(),
                                   result.design_id, result.content_hash.substr(0, 16));
    text += fmt::format("opponent  {}: median {} cycles over {} checked launches{}\n", result.opponent.label,
                        result.opponent.cycles_median ? fmt::format("{:.0f}", *result.opponent.cycles_median) : "-",
                        result.opponent.cycles.size(),
                        result.opponent.note.empty() ? "" : " (" + result.opponent.note + ")");
    for (const auto& stage : result.outcome.stages) {
        text += fmt::format("  {:<12} {:<12} {}\n", eval::stage_name(stage.stage), stage.verdict, stage.reason);
    }
    text += fmt::format("result    {}\n", result.summary);
    return text;
}

}  // namespace npuopt::campaign

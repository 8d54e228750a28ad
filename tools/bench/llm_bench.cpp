// `bench llm`: the LLM-backed roles through npuopt's whole loop, per kernel, prompt strategy and
// n (choices per call), at equal token budgets. Each cell is a fresh campaign on npu-sim whose
// only roles are llm-architect and llm-tuner (no heuristic role helps), run until its token
// budget is spent; printed per cell: the share of replies that parse, compile, pass correctness
// and are accepted, gamed kernels accepted (must be 0), the speedup over the baseline and the
// tokens it took.
//
// Without --endpoint the model is SCRIPTED: a server on loopback answers from a fixed pool of
// replies of known quality built from the target's own templates — broken (syntax error,
// unresolved name), correct-but-slow (the baseline), correct-and-fast (templates at their
// defaults and at random legal points), gamed (attention_output: the adversarial corpus) and
// malformed prose — drawn from the seed with weights that depend on what the prompt holds (a
// profile, a diagnosis, diagnostics to repair). The figures then measure npuopt's loop (the
// cascade as the oracle of best-of-n, the repair turns, the token accounting), not a model; the
// output says so. With --endpoint URL --model NAME the same cells run against a real
// OpenAI-compatible server (llama.cpp, vLLM, Ollama, …).
//
//   npuopt_bench_llm [--json] [--quick] [--kernels a,b] [--strategies s,t] [--n 1,8] [--tokens T]
//                    [--device-runs N] [--seed S] [--work DIR] [--knowledge-dir DIR] [--npuc PATH]
//                    [--endpoint URL --model NAME [--api-key-env VAR]]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "campaign/workspace.hpp"
#include "config/target_loader.hpp"
#include "config/template_config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "scripted_server.hpp"
#include "search/design.hpp"
#include "store/campaign_store.hpp"
#include "store/llm_store.hpp"
#include "store/tree_store.hpp"

namespace fs = std::filesystem;
using namespace npuopt;

namespace {

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::vector<std::string> split_list(const std::string& text) {
    std::vector<std::string> items;
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ',')) {
        if (!item.empty()) items.push_back(item);
    }
    return items;
}

/// `source` without its full-line comments and blank lines: what a model writes is code, not the
/// templates' essays (the code itself is unchanged).
std::string without_comments(const std::string& source) {
    std::string out;
    std::stringstream lines(source);
    std::string line;
    while (std::getline(lines, line)) {
        const auto first = line.find_first_not_of(" \t");
        if (first == std::string::npos || line.compare(first, 2, "//") == 0) continue;
        out += line + "\n";
    }
    return out;
}

/// Replies of known quality for one kernel.
struct Pool {
    std::vector<std::string> fast, slow, broken, gamed;
};

Pool make_pool(const config::KernelSpec& spec, const config::TargetConfig& target, std::uint64_t seed) {
    Pool pool;
    std::mt19937_64 rng(seed);
    std::vector<std::string> errors;
    for (const auto& tmpl : search::load_kernel_templates(config::load_template_dir(target.templates_dir), spec,
                                                          target.name, errors)) {
        if (tmpl->is_baseline()) {
            const std::string source = without_comments(tmpl->instantiate({}).source);
            for (int variant = 1; variant <= 4; ++variant) pool.slow.push_back(source + fmt::format("\n// variant {}\n", variant));
            continue;
        }
        pool.fast.push_back(without_comments(tmpl->instantiate(tmpl->default_assignment()).source));
        for (int tries = 0, found = 0; tries < 200 && found < 3; ++tries) {
            search::Assignment assignment;
            for (const auto& param : tmpl->params()) {
                assignment[param.name] = param.values[rng() % param.values.size()];
            }
            if (tmpl->check_domain(assignment) || tmpl->check_constraints(assignment)) continue;
            pool.fast.push_back(without_comments(tmpl->instantiate(assignment).source));
            ++found;
        }
    }
    for (const auto& source : pool.fast) {
        pool.broken.push_back(source + "\nfn broken( {\n");
        pool.broken.push_back(source + "\nfn helper() -> u32 { undefined_value }\n");
    }
    if (spec.name == "attention_output") {
        const fs::path corpus = fs::path(NPUOPT_SOURCE_DIR) / "tests/data/adversarial";
        for (const auto& entry : fs::directory_iterator(corpus)) {
            if (entry.path().extension() != ".rs") continue;
            const std::string text = read_text(entry.path());
            if (text.find("\n// expect: rejected") != std::string::npos) pool.gamed.push_back(text);
        }
        std::sort(pool.gamed.begin(), pool.gamed.end());
    }
    return pool;
}

std::string fenced(const std::string& code) { return "Here is the kernel.\n```rust\n" + code + "```\n"; }


/// The scripted model: a pool and weights by what the prompt holds. Thread-safe.
class ScriptedModel {
public:
    ScriptedModel(Pool pool, std::uint64_t seed) : m_pool(std::move(pool)), m_rng(seed) {}

    llm::stub::ScriptedReply answer(const llm::stub::ReceivedRequest& request) {
        std::lock_guard lock(m_mutex);
        const auto body = nlohmann::json::parse(request.body, nullptr, false);
        std::string prompt;
        std::string last_user;
        if (body.is_object() && body.contains("messages")) {
            for (const auto& message : body["messages"]) {
                const std::string content = message.value("content", "");
                prompt += content;
                if (message.value("role", "") == "user") last_user = content;
            }
        }
        const std::int64_t n = body.is_object() ? body.value("n", std::int64_t{1}) : 1;
        std::vector<std::string> contents;
        if (last_user.find("Diagnose the champion") != std::string::npos) {
            contents.push_back("The weight stream dominates the champion's time; overlap the loads with the tensor passes "
                               "and keep every engine busy.");
        } else {
            const bool repair = last_user.find("did not pass") != std::string::npos;
            const bool tuner = last_user.find("Improve the champion") != std::string::npos;
            const bool profile = prompt.find("## Profile of the champion") != std::string::npos;
            const bool diagnosis = prompt.find("## The analyst's diagnosis") != std::string::npos;
            for (std::int64_t choice = 0; choice < n; ++choice) contents.push_back(draw(repair, tuner, profile, diagnosis));
        }
        // as a real server: a choice longer than max_tokens is cut there (finish_reason "length")
        const std::int64_t max_tokens = body.is_object() ? body.value("max_tokens", std::int64_t{4096}) : 4096;
        nlohmann::json choices = nlohmann::json::array();
        std::int64_t completion_tokens = 0;
        for (std::size_t idx = 0; idx < contents.size(); ++idx) {
            std::string content = contents[idx];
            std::string finish = "stop";
            if (static_cast<std::int64_t>(content.size()) > 4 * max_tokens) {
                content.resize(static_cast<std::size_t>(4 * max_tokens));
                finish = "length";
            }
            completion_tokens += (static_cast<std::int64_t>(content.size()) + 3) / 4;
            choices.push_back({{"index", idx}, {"finish_reason", finish},
                               {"message", {{"role", "assistant"}, {"content", content}}}});
        }
        const std::int64_t prompt_tokens = (static_cast<std::int64_t>(prompt.size()) + 3) / 4;
        llm::stub::ScriptedReply reply;
        reply.body = nlohmann::json{{"id", "scripted"},
                                    {"object", "chat.completion"},
                                    {"model", "scripted-pool"},
                                    {"choices", choices},
                                    {"usage", {{"prompt_tokens", prompt_tokens},
                                               {"completion_tokens", completion_tokens},
                                               {"total_tokens", prompt_tokens + completion_tokens}}}}
                         .dump();
        return reply;
    }

    /// The category of a source the model served ("" when it did not serve it).
    std::string category_of(const std::string& source) const {
        std::lock_guard lock(m_mutex);
        auto found = m_served.find(source);
        return found == m_served.end() ? std::string() : found->second;
    }

private:
    std::string draw(bool repair, bool tuner, bool profile, bool diagnosis) {
        // weights: broken, gamed, malformed, slow, fast
        std::vector<double> weights = {0.50, 0.10, 0.10, 0.20, 0.10};
        if (profile) weights = {0.40, 0.10, 0.05, 0.15, 0.30};
        if (diagnosis) weights = {0.35, 0.05, 0.05, 0.15, 0.40};
        if (tuner) weights = {0.25, 0.05, 0.05, 0.30, 0.35};
        if (repair) weights = {0.40, 0.0, 0.0, 0.30, 0.30};
        if (m_pool.gamed.empty()) weights[1] = 0.0;
        std::discrete_distribution<int> pick(weights.begin(), weights.end());
        const int category = pick(m_rng);
        auto from = [&](const std::vector<std::string>& sources, const char* name) {
            if (sources.empty()) return std::string("I cannot write this kernel.");
            const std::string& source = sources[m_rng() % sources.size()];
            m_served.emplace(source, name);
            return fenced(source);
        };
        switch (category) {
            case 0: return from(m_pool.broken, "broken");
            case 1: return from(m_pool.gamed, "gamed");
            case 2: return std::string("I would restructure the loop so that loads overlap compute, then tile the weights.");
            case 3: return from(m_pool.slow, "slow");
            default: return from(m_pool.fast, "fast");
        }
    }

    Pool m_pool;
    std::mt19937_64 m_rng;
    mutable std::mutex m_mutex;
    std::map<std::string, std::string> m_served;
};

struct Cell {
    std::string kernel;
    std::string strategy;
    std::int64_t n = 1;
    std::string stop;
    std::int64_t calls = 0, repair_calls = 0, choices = 0, parsed = 0;
    std::int64_t designs = 0, compiled = 0, correct = 0, accepted = 0;
    std::int64_t gamed_designs = 0, gamed_accepted = 0;
    std::int64_t tokens = 0, device_runs = 0;
    std::map<std::string, std::int64_t> statuses;
    double speedup = 1.0;
    double wall_secs = 0.0;
};

double share(std::int64_t part, std::int64_t whole) { return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0; }

nlohmann::json cell_json(const Cell& cell) {
    return {{"kernel", cell.kernel},
            {"strategy", cell.strategy},
            {"n", cell.n},
            {"stop", cell.stop},
            {"calls", cell.calls},
            {"repair_calls", cell.repair_calls},
            {"replies", cell.choices},
            {"parsed", cell.parsed},
            {"designs", cell.designs},
            {"compiled", cell.compiled},
            {"correct", cell.correct},
            {"accepted", cell.accepted},
            {"parse_rate", share(cell.parsed, cell.choices)},
            {"compile_rate", share(cell.compiled, cell.choices)},
            {"correct_rate", share(cell.correct, cell.choices)},
            {"accept_rate", share(cell.accepted, cell.choices)},
            {"gamed_designs", cell.gamed_designs},
            {"gamed_accepted", cell.gamed_accepted},
            {"reply_statuses", cell.statuses},
            {"tokens", cell.tokens},
            {"device_runs", cell.device_runs},
            {"speedup", cell.speedup},
            {"tokens_per_accept", cell.accepted > 0 ? nlohmann::json(cell.tokens / cell.accepted) : nlohmann::json()},
            {"log2_speedup_per_1k_tokens", cell.tokens > 0 ? std::log2(cell.speedup) / (static_cast<double>(cell.tokens) / 1000.0) : 0.0},
            {"wall_secs", cell.wall_secs}};
}

struct Settings {
    std::vector<std::string> kernels = {"project_qkv", "attention_output", "feedforward"};
    std::vector<std::string> strategies = {"zero_shot", "profiling_guided", "iterative_refinement", "multi_agent"};
    std::vector<std::int64_t> ns = {1, 8};
    std::int64_t tokens = 150000;
    std::int64_t device_runs = 600;
    std::uint64_t seed = 7;
    fs::path work = fs::path(NPUOPT_BUILD_DIR) / "bench-llm";
    std::optional<fs::path> knowledge_dir;
    fs::path npuc = fs::path(NPUOPT_BUILD_DIR) / "npu-sim/1.0/bin/npuc";
    std::string endpoint;
    std::string model = "scripted-pool";
    std::string api_key_env = "NPUOPT_BENCH_LLM_KEY";
};

std::string campaign_yaml(const Settings& settings, const std::string& kernel, const std::string& strategy, std::int64_t n,
                          const std::string& base_url) {
    return fmt::format(
        "target: npu-sim\nkernels: [{}]\nseed: {}\n"
        "budgets: {{wall_time: 2h, device_runs: {}, llm_tokens: {}}}\nsandbox: {{required: false}}\n"
        "toolchain: {{bin: {}}}\n"
        "llm:\n  enabled: true\n  base_url: {}\n  model: {}\n  api_key_env: {}\n  n: {}\n  strategy: {}\n"
        "  roles: [architect, tuner]\n  heuristic_roles: []\n  repair_turns: 2\n  max_retries: 2\n  max_tokens: 8192\n"
        "  request_timeout_secs: 600\n",
        kernel, settings.seed, settings.device_runs, settings.tokens, settings.npuc.string(), base_url, settings.model,
        settings.api_key_env, n, strategy);
}

/// A campaign directory whose knowledge base is built once (quick) and copied into every cell.
fs::path knowledge_template(const Settings& settings) {
    const fs::path dir = settings.work / "kb";
    if (fs::exists(dir / "campaign.db") && fs::exists(dir / "kb.done")) return dir;
    fs::remove_all(dir);
    fs::create_directories(dir);
    {
        std::ofstream yaml(dir / "campaign.yaml");
        yaml << fmt::format("target: npu-sim\nseed: {}\nsandbox: {{required: false}}\ntoolchain: {{bin: {}}}\n", settings.seed,
                            settings.npuc.string());
    }
    store::CampaignStore::open(dir / "campaign.db");
    {
        auto workspace = campaign::open_workspace(dir, settings.knowledge_dir);
        campaign::KbBuildOptions options;
        options.quick = true;
        campaign::build_knowledge(workspace, options);
    }
    std::ofstream(dir / "kb.done") << "ok\n";
    return dir;
}

Cell run_cell(const Settings& settings, const fs::path& kb, const std::string& kernel, const std::string& strategy,
              std::int64_t n, const std::string& base_url, const ScriptedModel* model) {
    Cell cell;
    cell.kernel = kernel;
    cell.strategy = strategy;
    cell.n = n;
    const fs::path dir = settings.work / fmt::format("{}-{}-n{}", kernel, strategy, n);
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "campaign.yaml") << campaign_yaml(settings, kernel, strategy, n, base_url);
    {
        auto database = store::Database::open(kb / "campaign.db");
        database.execute("VACUUM INTO ?", {(dir / "campaign.db").string()});
    }
    const auto start = std::chrono::steady_clock::now();
    campaign::CampaignResult result = [&] {
        auto workspace = campaign::open_workspace(dir, settings.knowledge_dir);
        return campaign::run_workspace(workspace, {});
    }();
    cell.wall_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    cell.stop = campaign::stop_reason_name(result.stop);
    cell.device_runs = result.device_runs_used;

    auto store = store::CampaignStore::open(dir / "campaign.db");
    for (const auto& call : store::LlmStore(store.database()).list_calls()) {
        cell.tokens += call.prompt_tokens + call.completion_tokens;
        if (call.role == "llm-analyst") continue;
        cell.calls += 1;
        if (call.purpose == "repair") cell.repair_calls += 1;
        if (call.status != "ok") cell.statuses[call.status] += 1;
        for (const auto& choice : nlohmann::json::parse(call.choices_json, nullptr, false)) {
            if (!choice.is_object()) continue;
            cell.choices += 1;
            const std::string status = choice.value("status", "");
            if (status == "ok") cell.parsed += 1;
            else cell.statuses[status] += 1;
        }
    }
    store::TreeStore tree(store.database());
    for (const auto& edge : tree.list_edges(kernel)) {
        if (edge.role.rfind("llm-", 0) != 0) continue;
        cell.designs += 1;
        const bool early = edge.verdict == "failed" &&
                           (edge.last_stage == "rules" || edge.last_stage == "estimate" || edge.last_stage == "compile");
        const bool measured = edge.verdict == "accepted" || edge.last_stage == "screen" || edge.last_stage == "race";
        if (!early) cell.compiled += 1;
        if (measured) cell.correct += 1;
        if (edge.verdict == "accepted") cell.accepted += 1;
        if (model) {
            const auto design = store.find_design(edge.design_id);
            if (design && design->source && model->category_of(*design->source) == "gamed") {
                cell.gamed_designs += 1;
                if (edge.verdict == "accepted") cell.gamed_accepted += 1;
            }
        }
    }
    const auto path = tree.champion_path(kernel);
    if (path.size() >= 1 && path.back().cycles > 0) cell.speedup = path.front().cycles / path.back().cycles;
    return cell;
}

}  // namespace

int main(int argc, char** argv) {
    log::init_stderr(log::Level::warn);
    bool json = false;
    Settings settings;
    for (int arg_idx = 1; arg_idx < argc; ++arg_idx) {
        const std::string arg = argv[arg_idx];
        auto value = [&]() -> std::string {
            if (arg_idx + 1 >= argc) throw Error(ErrorKind::invalid_input, arg + " needs a value");
            return argv[++arg_idx];
        };
        try {
            if (arg == "--json") json = true;
            else if (arg == "--quick") {
                settings.kernels = {"attention_output"};
                settings.tokens = 60000;
                settings.device_runs = 300;
            } else if (arg == "--kernels") settings.kernels = split_list(value());
            else if (arg == "--strategies") settings.strategies = split_list(value());
            else if (arg == "--n") {
                settings.ns.clear();
                for (const auto& item : split_list(value())) settings.ns.push_back(std::stoll(item));
            } else if (arg == "--tokens") settings.tokens = std::stoll(value());
            else if (arg == "--device-runs") settings.device_runs = std::stoll(value());
            else if (arg == "--seed") settings.seed = std::stoull(value());
            else if (arg == "--work") settings.work = fs::absolute(value());
            else if (arg == "--knowledge-dir") settings.knowledge_dir = value();
            else if (arg == "--npuc") settings.npuc = fs::absolute(value());
            else if (arg == "--endpoint") settings.endpoint = value();
            else if (arg == "--model") settings.model = value();
            else if (arg == "--api-key-env") settings.api_key_env = value();
            else throw Error(ErrorKind::invalid_input, "unknown argument " + arg);
            if (settings.tokens <= 0 || settings.device_runs <= 0) throw Error(ErrorKind::invalid_input, "budgets must be positive");
        } catch (const std::exception& error) {
            std::cerr << "npuopt_bench_llm: error: " << error.what() << '\n';
            return 2;
        }
    }
    if (!fs::is_regular_file(settings.npuc)) {
        std::cerr << "npuopt_bench_llm: error: " << settings.npuc.string()
                  << " is not built (cmake --build build --target npu_sim, or --npuc PATH)\n";
        return 1;
    }
    const bool scripted = settings.endpoint.empty();
    if (!scripted && settings.model == "scripted-pool") {
        std::cerr << "npuopt_bench_llm: error: --endpoint needs --model NAME\n";
        return 2;
    }
    try {
        fs::create_directories(settings.work);
        const auto root = config::locate_knowledge_dir(settings.knowledge_dir);
        const auto target = config::load_target(root, "npu-sim");
        const auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
        const fs::path kb = knowledge_template(settings);
        std::vector<Cell> cells;
        for (const auto& kernel : settings.kernels) {
            const auto spec = std::find_if(kernels.kernels.begin(), kernels.kernels.end(),
                                           [&](const auto& candidate) { return candidate.name == kernel; });
            if (spec == kernels.kernels.end()) throw Error(ErrorKind::invalid_input, "unknown kernel " + kernel);
            for (const auto& strategy : settings.strategies) {
                for (const std::int64_t n : settings.ns) {
                    std::optional<ScriptedModel> model;
                    std::optional<llm::stub::ScriptedServer> server;
                    std::string base_url = settings.endpoint;
                    if (scripted) {
                        model.emplace(make_pool(*spec, target, settings.seed), settings.seed * 1000003 + static_cast<std::uint64_t>(n));
                        server.emplace();
                        ScriptedModel* answering = &*model;
                        server->set_responder([answering](const llm::stub::ReceivedRequest& request) {
                            return answering->answer(request);
                        });
                        base_url = server->base_url();
                    }
                    std::cerr << fmt::format("bench llm: {} {} n={} …\n", kernel, strategy, n);
                    cells.push_back(run_cell(settings, kb, kernel, strategy, n, base_url, model ? &*model : nullptr));
                }
            }
        }
        const std::string model_text =
            scripted ? "SCRIPTED: a server on loopback answering from a fixed pool of replies of known quality (broken, "
                       "correct-but-slow, correct-and-fast, gamed, malformed) built from the target's templates; these "
                       "figures measure npuopt's loop, not a language model"
                     : fmt::format("{} at {}", settings.model, settings.endpoint);
        if (json) {
            nlohmann::json out = {{"model", model_text},
                                  {"scripted", scripted},
                                  {"tokens_per_cell", settings.tokens},
                                  {"device_runs_cap_per_cell", settings.device_runs},
                                  {"seed", settings.seed},
                                  {"cells", nlohmann::json::array()}};
            for (const auto& cell : cells) out["cells"].push_back(cell_json(cell));
            std::cout << out.dump(2) << '\n';
        } else {
            std::cout << "model: " << model_text << "\n";
            std::cout << fmt::format("equal token budgets: {} tokens per cell (device runs capped at {}); roles: llm-architect "
                                     "and llm-tuner alone\n\n",
                                     settings.tokens, settings.device_runs);
            std::cout << fmt::format("{:<17} {:<21} {:>2} {:>5} {:>7} {:>6} {:>8} {:>7} {:>8} {:>5} {:>8} {:>7} {:>9}\n",
                                     "kernel", "strategy", "n", "calls", "replies", "parse", "compile", "correct",
                                     "accepted", "gamed", "speedup", "tokens", "tok/acc");
            for (const auto& cell : cells) {
                std::cout << fmt::format(
                    "{:<17} {:<21} {:>2} {:>5} {:>7} {:>5.0f}% {:>7.0f}% {:>6.0f}% {:>8} {:>5} {:>7.2f}x {:>7} {:>9}\n",
                    cell.kernel, cell.strategy, cell.n, cell.calls, cell.choices, 100 * share(cell.parsed, cell.choices),
                    100 * share(cell.compiled, cell.choices), 100 * share(cell.correct, cell.choices), cell.accepted,
                    fmt::format("{}/{}", cell.gamed_accepted, cell.gamed_designs), cell.speedup, cell.tokens,
                    cell.accepted > 0 ? fmt::format("{}", cell.tokens / cell.accepted) : std::string("-"));
            }
            std::cout << "\nrates are per reply; gamed = accepted/evaluated gamed kernels (must be 0/k)\n";
        }
    } catch (const std::exception& error) {
        std::cerr << "npuopt_bench_llm: error: " << error.what() << '\n';
        return 1;
    }
    return 0;
}

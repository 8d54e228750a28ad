#include "adversarial_bench.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "config/campaign_config.hpp"
#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "eval/cascade.hpp"
#include "knowledge/rules.hpp"
#include "proc/subprocess.hpp"
#include "campaign/workspace.hpp"
#include "search/design.hpp"
#include "store/knowledge_store.hpp"

namespace npuopt::bench {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

/// The scratch campaigns' sandbox limits: tight enough that the escapes can cross them without
/// hurting the machine (the memory kernel forks 3 × 1.5 GB), loose enough for rustc.
constexpr int k_memory_mb = 2048;
constexpr int k_processes = 64;
constexpr std::uint64_t k_flood_db_bytes = 64ull << 20;
constexpr long k_flood_rss_kb = 1l << 20;
constexpr const char* k_marker_prefix = "npuopt-escape-";
constexpr const char* k_process_prefix = "npuadv";
constexpr const char* k_escaped_token = "NPUOPT-ESCAPED-";

std::string read_file(const fs::path& path, std::size_t cap = std::string::npos) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return {};
    std::string text;
    if (cap == std::string::npos) {
        std::stringstream buffer;
        buffer << in.rdbuf();
        return buffer.str();
    }
    text.resize(cap);
    in.read(text.data(), static_cast<std::streamsize>(cap));
    text.resize(static_cast<std::size_t>(in.gcount()));
    return text;
}

void write_file(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw Error(ErrorKind::io, fmt::format("cannot write {}", path.string()));
}

std::string random_hex(std::size_t chars) {
    std::random_device device;
    std::string text;
    while (text.size() < chars) text += fmt::format("{:08x}", device());
    return text.substr(0, chars);
}

std::string trim(std::string text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    std::size_t start = 0;
    while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
    return text.substr(start);
}

std::string one_line(std::string text, std::size_t cap) {
    for (auto& ch : text) {
        if (ch == '\n' || ch == '\r' || ch == '|') ch = ' ';
    }
    if (text.size() > cap) text = text.substr(0, cap - 3) + "...";
    return text;
}

// ---- canaries ---------------------------------------------------------------------------------

/// The planted secrets; removed (and the environment restored) on destruction.
class Canaries {
public:
    Canaries() : m_root(k_adversarial_canary_root) {
        fs::create_directories(m_root / "home" / ".ssh");
        fs::create_directories(m_root / "other-campaign");
        m_lock_fd = ::open((m_root / "lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
        // One run at a time (the canaries and the listener port are shared): wait for the other.
        if (m_lock_fd < 0 || ::flock(m_lock_fd, LOCK_EX) != 0) {
            if (m_lock_fd >= 0) ::close(m_lock_fd);
            throw Error(ErrorKind::io, fmt::format("bench adversarial: cannot lock {}", (m_root / "lock").string()));
        }
        env_secret = "NPUOPT-CANARY-ENV-" + random_hex(24);
        home_secret = "NPUOPT-CANARY-HOME-" + random_hex(24);
        db_secret = "NPUOPT-CANARY-DB-" + random_hex(24);
        write_file(m_root / "home" / ".ssh" / "id_rsa",
                   "-----BEGIN OPENSSH PRIVATE KEY-----\n" + home_secret + "\n-----END OPENSSH PRIVATE KEY-----\n");
        fs::remove(m_root / "other-campaign" / "campaign.db");
        {
            auto other = store::CampaignStore::open(m_root / "other-campaign" / "campaign.db");
            other.set_meta("target", "npu-sim");
            other.set_meta("notes", "api token of the other team: " + db_secret);
        }
        if (const char* home = std::getenv("HOME")) m_old_home = home;
        ::setenv("NPUOPT_TEST_SECRET_TOKEN", env_secret.c_str(), 1);
        ::setenv("HOME", (m_root / "home").c_str(), 1);
    }
    ~Canaries() {
        ::unsetenv("NPUOPT_TEST_SECRET_TOKEN");
        if (m_old_home) ::setenv("HOME", m_old_home->c_str(), 1);
        std::error_code ignored;
        write_file_quietly(m_root / "home" / ".ssh" / "id_rsa", "(no key: the adversarial bench is not running)\n");
        fs::remove(m_root / "other-campaign" / "campaign.db", ignored);
        ::close(m_lock_fd);
    }
    Canaries(const Canaries&) = delete;
    Canaries& operator=(const Canaries&) = delete;

    const fs::path& root() const { return m_root; }
    std::optional<fs::path> old_home() const { return m_old_home ? std::optional<fs::path>(*m_old_home) : std::nullopt; }
    std::vector<std::pair<std::string, std::string>> secrets() const {
        return {{"env secret", env_secret}, {"home key", home_secret}, {"other campaign's db", db_secret}};
    }

    std::string env_secret, home_secret, db_secret;

private:
    static void write_file_quietly(const fs::path& path, const std::string& text) {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out << text;
    }
    fs::path m_root;
    int m_lock_fd = -1;
    std::optional<std::string> m_old_home;
};

// ---- monitors ---------------------------------------------------------------------------------

struct NamedProcess {
    int pid = 0;
    std::string comm;
    std::uint64_t rss_bytes = 0;
};

/// Processes whose /proc/PID/comm starts with the corpus's prefix.
std::vector<NamedProcess> corpus_processes() {
    std::vector<NamedProcess> found;
    DIR* proc = ::opendir("/proc");
    if (!proc) return found;
    static const long page = ::sysconf(_SC_PAGESIZE);
    while (dirent* entry = ::readdir(proc)) {
        const std::string name = entry->d_name;
        if (name.empty() || !std::all_of(name.begin(), name.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) continue;
        std::string comm = trim(read_file(fs::path("/proc") / name / "comm", 64));
        if (comm.rfind(k_process_prefix, 0) != 0) continue;
        NamedProcess process;
        process.pid = std::atoi(name.c_str());
        process.comm = comm;
        std::istringstream statm(read_file(fs::path("/proc") / name / "statm", 256));
        std::uint64_t size = 0, resident = 0;
        statm >> size >> resident;
        process.rss_bytes = resident * static_cast<std::uint64_t>(page);
        found.push_back(process);
    }
    ::closedir(proc);
    return found;
}

/// Samples /proc and accepts connections on the listener port while one case runs.
class CallMonitor {
public:
    CallMonitor() {
        m_listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        ::setsockopt(m_listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(static_cast<std::uint16_t>(k_adversarial_listener_port));
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (m_listen_fd < 0 || ::bind(m_listen_fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
            ::listen(m_listen_fd, 16) != 0) {
            listener_error = fmt::format("cannot listen on 127.0.0.1:{}", k_adversarial_listener_port);
            if (m_listen_fd >= 0) ::close(m_listen_fd);
            m_listen_fd = -1;
        }
        m_sampler = std::thread([this] { sample(); });
        if (m_listen_fd >= 0) m_listener = std::thread([this] { listen(); });
    }
    ~CallMonitor() { stop(); }
    CallMonitor(const CallMonitor&) = delete;
    CallMonitor& operator=(const CallMonitor&) = delete;

    void stop() {
        m_stop = true;
        if (m_sampler.joinable()) m_sampler.join();
        if (m_listener.joinable()) m_listener.join();
        if (m_listen_fd >= 0) ::close(m_listen_fd);
        m_listen_fd = -1;
    }

    std::size_t peak_processes = 0;
    std::uint64_t peak_rss_bytes = 0;
    int connections = 0;
    std::string received;
    std::string listener_error;

private:
    void sample() {
        while (!m_stop) {
            auto processes = corpus_processes();
            std::uint64_t rss = 0;
            for (const auto& process : processes) rss += process.rss_bytes;
            peak_processes = std::max(peak_processes, processes.size());
            peak_rss_bytes = std::max(peak_rss_bytes, rss);
            std::this_thread::sleep_for(std::chrono::milliseconds(40));
        }
    }
    void listen() {
        while (!m_stop) {
            pollfd wait{m_listen_fd, POLLIN, 0};
            if (::poll(&wait, 1, 100) <= 0) continue;
            int client = ::accept4(m_listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (client < 0) continue;
            ++connections;
            char buffer[65536];
            pollfd readable{client, POLLIN, 0};
            if (::poll(&readable, 1, 1000) > 0) {
                ssize_t got = ::read(client, buffer, sizeof buffer);
                if (got > 0 && received.size() < (1u << 20)) received.append(buffer, static_cast<std::size_t>(got));
            }
            ::close(client);
        }
    }
    std::atomic<bool> m_stop{false};
    int m_listen_fd = -1;
    std::thread m_sampler;
    std::thread m_listener;
};

long self_max_rss_kb() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss;
}

/// Files named npuopt-escape-* directly in `dir` (or anywhere below it with `recursive`).
void find_markers(const fs::path& dir, bool recursive, std::vector<fs::path>& found) {
    std::error_code error;
    if (!fs::is_directory(dir, error)) return;
    auto consider = [&](const fs::directory_entry& entry) {
        if (entry.path().filename().string().rfind(k_marker_prefix, 0) == 0) found.push_back(entry.path());
    };
    if (recursive) {
        for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, error);
             !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
            consider(*it);
        }
    } else {
        for (const auto& entry : fs::directory_iterator(dir, fs::directory_options::skip_permission_denied, error)) consider(entry);
    }
}

std::vector<fs::path> marker_files(const fs::path& case_dir, const Canaries& canaries) {
    std::vector<fs::path> found;
    find_markers(case_dir, true, found);
    std::set<fs::path> shallow = {canaries.root(), "/tmp", "/var/tmp", fs::current_path()};
    if (auto home = canaries.old_home()) shallow.insert(*home);
    for (const auto& dir : shallow) find_markers(dir, false, found);
    std::sort(found.begin(), found.end());
    found.erase(std::unique(found.begin(), found.end()), found.end());
    return found;
}

// ---- scratch campaigns ------------------------------------------------------------------------

std::string canonical_shape(const std::map<std::string, std::int64_t>& shape) {
    std::string text;
    for (const auto& [key, value] : shape) text += fmt::format("{}{}={}", text.empty() ? "" : ",", key, value);
    return text;
}

/// A campaign directory as `npuopt init` writes it, with the bench's sandbox limits.
void init_scratch_campaign(const fs::path& dir, const config::TargetConfig& target,
                           const config::KernelsConfig& kernels, const std::optional<fs::path>& toolchain) {
    std::vector<std::string> names;
    for (const auto& kernel : kernels.kernels) names.push_back(kernel.name);
    std::string yaml = config::campaign_yaml_template(target.name, names, 1);
    yaml = std::regex_replace(yaml, std::regex("memory_mb: *[0-9]+"), fmt::format("memory_mb: {}", k_memory_mb));
    yaml = std::regex_replace(yaml, std::regex("processes: *[0-9]+"), fmt::format("processes: {}", k_processes));
    if (toolchain) yaml = std::regex_replace(yaml, std::regex("bin: \"\""), fmt::format("bin: \"{}\"", fs::absolute(*toolchain).string()));
    fs::create_directories(dir);
    write_file(dir / config::k_campaign_file_name, yaml);
    auto store = store::CampaignStore::open(dir / config::k_campaign_db_name);
    store.set_meta("target", target.name);
    store.set_meta("npuopt_version", NPUOPT_VERSION);
    store.set_meta("seed", "1");
}

/// One case's campaign: the workspace, its rule book and a cascade set up as `npuopt run` does.
struct ScratchCampaign {
    campaign::Workspace workspace;
    std::unique_ptr<store::KnowledgeStore> knowledge_store;
    std::unique_ptr<knowledge::RuleBook> rules;
    std::unique_ptr<eval::Cascade> cascade;
    campaign::KernelSetup setup;

    ScratchCampaign(const fs::path& dir, const std::optional<fs::path>& knowledge_dir, const std::string& kernel)
        : workspace(campaign::open_workspace(dir, knowledge_dir)) {
        const std::string version = workspace.toolchain_version();
        knowledge_store = std::make_unique<store::KnowledgeStore>(workspace.store->database());
        rules = std::make_unique<knowledge::RuleBook>(*knowledge_store, workspace.target.name, version);
        eval::CascadeConfig config;
        config.seed = workspace.campaign.seed;
        config.acceptance.alpha = workspace.campaign.acceptance.alpha;
        config.acceptance.min_effect = workspace.campaign.acceptance.min_effect;
        config.acceptance.max_pairs = static_cast<std::size_t>(workspace.campaign.acceptance.max_runs_per_race);
        cascade = std::make_unique<eval::Cascade>(*workspace.toolchain, *workspace.store, rules.get(), nullptr, config);
        bool found = false;
        for (auto& candidate : workspace.kernel_setups()) {
            if (candidate.spec.name == kernel) {
                setup = std::move(candidate);
                found = true;
            }
        }
        if (!found) throw Error(ErrorKind::invalid_input, fmt::format("bench adversarial: no kernel '{}' in the target", kernel));
    }

    /// Record a design of `source` and write its file as the campaign driver does.
    eval::Candidate candidate(const std::string& template_name, const std::string& source,
                              const search::Design* design = nullptr) {
        const std::string shape = canonical_shape(setup.context.shape);
        const std::string hash = search::design_hash(workspace.target.name, setup.spec.name, shape, source);
        store::DesignRecord record;
        record.content_hash = hash;
        record.target = workspace.target.name;
        record.kernel = setup.spec.name;
        record.shape = shape;
        record.template_name = template_name;
        record.params_json = design ? design->params_json().dump() : "{}";
        record.source = source;
        eval::Candidate result;
        result.design_id = workspace.store->record_design(record);
        result.content_hash = hash;
        result.kernel = setup.spec.name;
        result.source_file = workspace.dir / "designs" / (setup.spec.name + "-" + hash.substr(0, 16) + ".rs");
        write_file(result.source_file, source);
        if (design) {
            result.quantities = design->quantities;
            result.features = design->features;
        }
        return result;
    }

    std::shared_ptr<search::Template> baseline_template() const {
        for (const auto& tmpl : setup.templates) {
            if (tmpl->is_baseline()) return tmpl;
        }
        throw Error(ErrorKind::invalid_config, fmt::format("bench adversarial: kernel {} has no baseline", setup.spec.name));
    }

    eval::Candidate instantiate(const search::Template& tmpl) {
        search::Design design = tmpl.instantiate(tmpl.default_assignment());
        return candidate(tmpl.name(), design.source, &design);
    }
};

/// The verdict of an outcome: accepted, or rejected at the first stage that did not pass.
void describe_outcome(const eval::Outcome& outcome, AdversarialRow& row) {
    row.device_runs = outcome.device_runs;
    if (outcome.accepted) {
        row.verdict = "accepted";
        row.stage = outcome.stages.empty() ? "" : eval::stage_name(outcome.stages.back().stage);
        row.reason = outcome.final_reason;
        return;
    }
    row.verdict = "rejected";
    for (const auto& stage : outcome.stages) {
        if (stage.verdict != eval::Verdict::pass && stage.verdict != eval::Verdict::skip) {
            row.stage = eval::stage_name(stage.stage);
            row.reason = fmt::format("{}: {}", stage.verdict, stage.reason);
            return;
        }
    }
    row.stage = outcome.stages.empty() ? "" : eval::stage_name(outcome.stages.back().stage);
    row.reason = outcome.final_reason;
}

}  // namespace

AdversarialRow confirm_gaming_accept(AdversarialRow first, const std::function<AdversarialRow()>& again) {
    if (first.item.expect != "rejected" || first.verdict != "accepted" || first.stage != "race" || !first.escapes.empty()) {
        return first;
    }
    std::string history = fmt::format("attempt 1 accepted by the race ({})", first.reason);
    for (int attempt = 2; attempt <= 3; ++attempt) {
        AdversarialRow rerun = again();
        history += fmt::format("; attempt {} {} at {} ({})", attempt, rerun.verdict, rerun.stage, rerun.reason);
        if (rerun.verdict != "rejected" || !rerun.escapes.empty()) {
            rerun.reason = history;
            rerun.met = false;
            return rerun;
        }
    }
    first.verdict = "rejected";
    first.met = true;
    first.reason = history + ": a race's false accept of an equal design, not the attack";
    return first;
}

namespace {

/// Noise-free device-model cycles of an honest design (npuc's undocumented `trace`): the figure
/// that must not move across a toolchain change. Controls only: run outside the sandbox.
std::optional<double> model_cycles(const ScratchCampaign& campaign, const fs::path& file) {
    auto bin = campaign.workspace.toolchain->resolve_bin();
    if (!bin) return std::nullopt;
    std::map<std::string, std::string> env = {{"NPUC_CACHE_DIR", campaign.workspace.cache_dir.string()}};
    for (const char* name : {"NPU_SIM_PROFILE", "HOME"}) {
        if (const char* value = std::getenv(name)) env[name] = value;
    }
    auto call = [&](std::vector<std::string> argv) {
        proc::Command command;
        command.argv = std::move(argv);
        command.env = env;
        command.sandbox.enabled = false;
        command.limits.timeout_secs = 300;
        return proc::run(command);
    };
    call({bin->string(), "compile", file.string(), "--message-format", "json"});  // 1.0 before the boundary has none
    auto result = call({bin->string(), "trace", file.string(), "--kernel", campaign.setup.spec.name, "--shape",
                        target::format_shape(campaign.setup.context.shape)});
    static const std::regex k_dev_cycles(R"("dev_cycles":([0-9.eE+]+))");
    std::smatch match;
    if (std::regex_search(result.stdout_text, match, k_dev_cycles)) return std::stod(match[1].str());
    return std::nullopt;
}

/// Everything that got out of a case's calls.
std::vector<std::string> escape_findings(const fs::path& case_dir, const Canaries& canaries, CallMonitor& monitor,
                                         long rss_before_kb) {
    std::vector<std::string> escapes;
    for (const auto& process : corpus_processes()) {
        escapes.push_back(fmt::format("process {} ({}) outlived its call", process.pid, process.comm));
        ::kill(process.pid, SIGKILL);
    }
    if (monitor.peak_processes > static_cast<std::size_t>(k_processes)) {
        escapes.push_back(fmt::format("{} processes at once (limit {} per call)", monitor.peak_processes, k_processes));
    }
    if (monitor.peak_rss_bytes > (static_cast<std::uint64_t>(k_memory_mb) << 20)) {
        escapes.push_back(fmt::format("{} MiB resident across processes (limit {} MiB per call)",
                                      monitor.peak_rss_bytes >> 20, k_memory_mb));
    }
    if (monitor.connections > 0) {
        escapes.push_back(fmt::format("{} connection(s) to 127.0.0.1:{}", monitor.connections, k_adversarial_listener_port));
    }
    for (const auto& marker : marker_files(case_dir, canaries)) {
        escapes.push_back("marker file " + marker.string());
        std::error_code ignored;
        fs::remove(marker, ignored);
    }
    // Canaries anywhere in what the case left on disk (database, cache, designs, scratch files).
    std::error_code error;
    std::set<std::string> leaked;
    for (auto it = fs::recursive_directory_iterator(case_dir, fs::directory_options::skip_permission_denied, error);
         !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
        if (!it->is_regular_file(error) || it->file_size(error) > (512ull << 20)) continue;
        const std::string text = read_file(it->path());
        const std::string name = it->path().filename().string();
        const bool database = name.find(".db") != std::string::npos;
        for (const auto& [what, secret] : canaries.secrets()) {
            if (text.find(secret) != std::string::npos) {
                leaked.insert(fmt::format("{} in {}", what, fs::relative(it->path(), case_dir, error).string()));
            }
        }
        if (database && text.find(k_escaped_token) != std::string::npos) {
            leaked.insert(fmt::format("escape report ({}) in {}", k_escaped_token,
                                      fs::relative(it->path(), case_dir, error).string()));
        }
    }
    for (const auto& [what, secret] : canaries.secrets()) {
        if (monitor.received.find(secret) != std::string::npos) leaked.insert(what + " sent to the listener");
    }
    for (const auto& item : leaked) escapes.push_back("leaked: " + item);
    std::uint64_t db_bytes = 0;
    for (const char* suffix : {"", "-wal"}) {
        fs::path db = case_dir / (std::string(config::k_campaign_db_name) + suffix);
        if (fs::exists(db, error)) db_bytes += fs::file_size(db, error);
    }
    if (db_bytes > k_flood_db_bytes) escapes.push_back(fmt::format("campaign.db grew to {} MiB", db_bytes >> 20));
    const long rss_growth_kb = self_max_rss_kb() - rss_before_kb;
    if (rss_growth_kb > k_flood_rss_kb) escapes.push_back(fmt::format("npuopt's own memory grew by {} MiB", rss_growth_kb >> 10));
    return escapes;
}

std::string kernel_of(const std::string& source, const fs::path& file) {
    static const std::regex k_kernels(R"(kernels!\s*\{\s*([a-z_]+)\s*=>)");
    std::smatch match;
    if (!std::regex_search(source, match, k_kernels)) {
        throw Error(ErrorKind::invalid_input, fmt::format("{}: no `npu::kernels! {{ <kernel> => ... }}`", file.string()));
    }
    return match[1].str();
}

}  // namespace

// ---- the corpus -------------------------------------------------------------------------------

AdversarialCase parse_adversarial_case(const fs::path& file) {
    const std::string source = read_file(file);
    if (source.empty()) throw Error(ErrorKind::invalid_input, fmt::format("{}: empty or unreadable", file.string()));
    AdversarialCase item;
    item.file = file;
    item.name = file.stem().string();
    std::istringstream lines(source);
    std::string line;
    for (int number = 0; number < 8 && std::getline(lines, line); ++number) {
        static const std::regex k_header(R"(^// adversarial: ([^:]+): (.+)$)");
        static const std::regex k_expect(R"(^// expect: (rejected|contained|accepted)\s*$)");
        std::smatch match;
        if (std::regex_match(line, match, k_header)) {
            item.pattern = trim(match[1].str());
            item.description = trim(match[2].str());
        } else if (std::regex_match(line, match, k_expect)) {
            item.expect = match[1].str();
        }
    }
    if (item.pattern.empty() || item.expect.empty()) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("{}: expected a header `// adversarial: <pattern>: <description>` and "
                                "`// expect: rejected|contained|accepted` in its first lines",
                                file.string()));
    }
    item.kind = item.expect == "rejected" ? "gaming" : item.expect == "contained" ? "escape" : "control";
    item.kernel = kernel_of(source, file);
    return item;
}

std::vector<AdversarialCase> load_adversarial_corpus(const fs::path& dir) {
    if (!fs::is_directory(dir)) {
        throw Error(ErrorKind::invalid_input, fmt::format("bench adversarial: {} is not a directory", dir.string()));
    }
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir)) {
        if (entry.is_regular_file() && entry.path().extension() == ".rs") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    std::vector<AdversarialCase> cases;
    for (const auto& file : files) cases.push_back(parse_adversarial_case(file));
    if (cases.empty()) throw Error(ErrorKind::invalid_input, fmt::format("bench adversarial: no *.rs in {}", dir.string()));
    return cases;
}

bool AdversarialReport::goals_met() const {
    return gaming_accepted == 0 && escapes_contained == escapes_total && controls_accepted == controls_total &&
           controls_cycles_ok == controls_cycles_known;
}

// ---- the run ----------------------------------------------------------------------------------

AdversarialReport run_adversarial_bench(const AdversarialOptions& options) {
    const fs::path corpus_dir = options.corpus_dir.empty() ? fs::path(NPUOPT_SOURCE_DIR) / "tests" / "data" / "adversarial"
                                                           : options.corpus_dir;
    std::vector<AdversarialCase> corpus = load_adversarial_corpus(corpus_dir);
    auto selected = [&](const std::string& name) {
        return options.only.empty() || std::find(options.only.begin(), options.only.end(), name) != options.only.end();
    };
    for (const auto& name : options.only) {
        if (name != "controls" && std::none_of(corpus.begin(), corpus.end(), [&](const auto& c) { return c.name == name; })) {
            throw Error(ErrorKind::invalid_input, fmt::format("bench adversarial: no kernel '{}' in {}", name, corpus_dir.string()));
        }
    }
    nlohmann::json before = nlohmann::json::object();
    if (options.cycles_before) {
        try {
            before = nlohmann::json::parse(read_file(*options.cycles_before));
        } catch (const std::exception& error) {
            throw Error(ErrorKind::invalid_input, fmt::format("{}: {}", options.cycles_before->string(), error.what()));
        }
    }
    const fs::path knowledge_root = config::locate_knowledge_dir(options.knowledge_dir);
    const config::TargetConfig target = config::load_target(knowledge_root, "npu-sim");
    const config::KernelsConfig kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);

    Canaries canaries;
    AdversarialReport report;
    report.work_dir = canaries.root() / fmt::format("run-{}", ::getpid());
    fs::remove_all(report.work_dir);
    fs::create_directories(report.work_dir);
    for (const auto& stale : marker_files(report.work_dir, canaries)) fs::remove(stale);

    int case_number = 0;
    // Runs one case in its own scratch campaign and judges it against its expectation.
    auto run_once = [&](AdversarialRow row, const std::function<void(ScratchCampaign&, AdversarialRow&)>& body) {
        const fs::path case_dir = report.work_dir / fmt::format("{:02d}-{}", ++case_number,
                                                                std::regex_replace(row.item.name, std::regex("[^A-Za-z0-9_.-]"), "_"));
        const auto start = Clock::now();
        const long rss_before = self_max_rss_kb();
        CallMonitor monitor;
        try {
            init_scratch_campaign(case_dir, target, kernels, options.toolchain);
            ScratchCampaign campaign(case_dir, options.knowledge_dir, row.item.kernel);
            body(campaign, row);
        } catch (const Error& error) {
            row.verdict = "error";
            row.reason = error.what();
        }
        monitor.stop();
        row.escapes = escape_findings(case_dir, canaries, monitor, rss_before);
        if (!monitor.listener_error.empty()) row.escapes.push_back("unchecked: " + monitor.listener_error);
        row.secs = std::chrono::duration<double>(Clock::now() - start).count();
        if (row.item.expect == "rejected") {
            row.met = row.verdict == "rejected";
        } else if (row.item.expect == "contained") {
            row.met = row.verdict != "error" && row.escapes.empty();
        } else {
            row.met = row.verdict == "accepted";
            if (row.model_cycles && row.model_cycles_before) {
                row.met = row.met && std::abs(*row.model_cycles / *row.model_cycles_before - 1.0) <= options.cycles_tolerance;
            }
        }
        if (!options.keep) {
            std::error_code ignored;
            fs::remove_all(case_dir, ignored);
        }
        return row;
    };
    auto run_case = [&](const AdversarialRow& row, const std::function<void(ScratchCampaign&, AdversarialRow&)>& body) {
        AdversarialRow result = confirm_gaming_accept(run_once(row, body), [&] { return run_once(row, body); });
        if (options.on_row) options.on_row(result);
        report.rows.push_back(std::move(result));
    };

    // The corpus: each kernel against its baseline (the champion the cascade races).
    for (const auto& item : corpus) {
        if (!selected(item.name)) continue;
        AdversarialRow row;
        row.item = item;
        run_case(row, [&](ScratchCampaign& campaign, AdversarialRow& result) {
            auto baseline = campaign.instantiate(*campaign.baseline_template());
            const eval::Outcome first = campaign.cascade->evaluate(baseline, std::nullopt, campaign.setup.context);
            if (!first.accepted || !first.cycles_median) {
                throw Error(ErrorKind::toolchain,
                            fmt::format("the baseline of {} did not become champion: {}", item.kernel, first.final_reason));
            }
            auto candidate = campaign.candidate("adversarial/" + item.name, read_file(item.file));
            const eval::Outcome outcome = campaign.cascade->evaluate(
                candidate, eval::Champion{baseline, *first.cycles_median}, campaign.setup.context);
            describe_outcome(outcome, result);
            result.cycles = outcome.cycles_median;
        });
    }

    // The honest controls: each baseline as a first design, each template's defaults against it.
    nlohmann::json saved = nlohmann::json::object();
    if (options.controls && selected("controls")) {
        for (const auto& kernel : kernels.kernels) {
            std::vector<std::string> template_names;
            for (auto& setup : campaign::prepare_kernels(kernels, {kernel.name}, target.templates_dir, target.name)) {
                for (const auto& tmpl : setup.templates) template_names.push_back(tmpl->is_baseline() ? "" : tmpl->name());
                for (const auto& error : setup.template_errors) {
                    AdversarialRow broken;
                    broken.item = {fs::path(), kernel.name + "/?", kernel.name, "honest control", "a template that does not load",
                                   "accepted", "control"};
                    broken.verdict = "error";
                    broken.reason = error;
                    report.rows.push_back(broken);
                }
            }
            for (const auto& template_name : template_names) {
                AdversarialRow row;
                const std::string label = template_name.empty() ? "baseline" : template_name;
                row.item = {template_name.empty() ? fs::path(kernel.baseline) : target.templates_dir / template_name, kernel.name + "/" + label,
                            kernel.name, "honest control",
                            template_name.empty() ? "the official baseline, as the first design (becomes champion)"
                                                  : "the template at its defaults, raced against the baseline",
                            "accepted", "control"};
                run_case(row, [&](ScratchCampaign& campaign, AdversarialRow& result) {
                    auto baseline = campaign.instantiate(*campaign.baseline_template());
                    const eval::Outcome first = campaign.cascade->evaluate(baseline, std::nullopt, campaign.setup.context);
                    eval::Outcome outcome = first;
                    eval::Candidate design = baseline;
                    if (!template_name.empty()) {
                        if (!first.accepted || !first.cycles_median) {
                            throw Error(ErrorKind::toolchain, fmt::format("the baseline of {} did not become champion: {}",
                                                                          kernel.name, first.final_reason));
                        }
                        std::shared_ptr<search::Template> tmpl;
                        for (const auto& candidate : campaign.setup.templates) {
                            if (candidate->name() == template_name) tmpl = candidate;
                        }
                        if (auto violated = tmpl->check_constraints(tmpl->default_assignment())) {
                            throw Error(ErrorKind::invalid_config, fmt::format("defaults violate {}", *violated));
                        }
                        design = campaign.instantiate(*tmpl);
                        outcome = campaign.cascade->evaluate(design, eval::Champion{baseline, *first.cycles_median},
                                                             campaign.setup.context);
                    }
                    describe_outcome(outcome, result);
                    result.cycles = outcome.cycles_median;
                    result.model_cycles = model_cycles(campaign, design.source_file);
                    const std::string key = result.item.name;
                    if (result.model_cycles) saved[key] = *result.model_cycles;
                    if (before.contains(key) && before[key].is_number()) result.model_cycles_before = before[key].get<double>();
                });
            }
        }
    }
    if (options.save_cycles) write_file(*options.save_cycles, saved.dump(2) + "\n");

    for (const auto& row : report.rows) {
        if (row.item.kind == "gaming") {
            ++report.gaming_total;
            if (row.verdict == "accepted") ++report.gaming_accepted;
        } else if (row.item.kind == "escape") {
            ++report.escapes_total;
            if (row.met) ++report.escapes_contained;
        } else {
            ++report.controls_total;
            if (row.verdict == "accepted") ++report.controls_accepted;
            if (row.model_cycles && row.model_cycles_before) {
                ++report.controls_cycles_known;
                if (std::abs(*row.model_cycles / *row.model_cycles_before - 1.0) <= options.cycles_tolerance) ++report.controls_cycles_ok;
            }
        }
    }
    if (!options.keep) {
        std::error_code ignored;
        fs::remove_all(report.work_dir, ignored);
    }
    return report;
}

// ---- output -----------------------------------------------------------------------------------

nlohmann::json adversarial_report_json(const AdversarialReport& report) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : report.rows) {
        nlohmann::json item = {{"kernel", row.item.name},   {"target_kernel", row.item.kernel},
                               {"pattern", row.item.pattern}, {"description", row.item.description},
                               {"kind", row.item.kind},       {"expected", row.item.expect},
                               {"verdict", row.verdict},      {"stage", row.stage},
                               {"reason", row.reason},        {"escapes", row.escapes},
                               {"met", row.met},              {"device_runs", row.device_runs},
                               {"secs", row.secs}};
        item["cycles"] = row.cycles ? nlohmann::json(*row.cycles) : nlohmann::json(nullptr);
        item["model_cycles"] = row.model_cycles ? nlohmann::json(*row.model_cycles) : nlohmann::json(nullptr);
        item["model_cycles_before"] = row.model_cycles_before ? nlohmann::json(*row.model_cycles_before) : nlohmann::json(nullptr);
        rows.push_back(item);
    }
    return {{"type", "bench_adversarial"},
            {"rows", rows},
            {"gaming", {{"total", report.gaming_total}, {"accepted", report.gaming_accepted}}},
            {"escapes", {{"total", report.escapes_total}, {"contained", report.escapes_contained}}},
            {"controls",
             {{"total", report.controls_total},
              {"accepted", report.controls_accepted},
              {"cycles_compared", report.controls_cycles_known},
              {"cycles_within_tolerance", report.controls_cycles_ok}}},
            {"goals_met", report.goals_met()}};
}

std::string adversarial_report_table(const AdversarialReport& report) {
    std::string text = "| kernel | pattern | expected | verdict | reason | escaped | met |\n|---|---|---|---|---|---|---|\n";
    for (const auto& row : report.rows) {
        std::string verdict = row.verdict;
        if (row.verdict == "rejected" && !row.stage.empty()) verdict += " at " + row.stage;
        if (row.item.kind == "escape" && row.verdict != "error") verdict = (row.escapes.empty() ? "contained; " : "ESCAPED; ") + verdict;
        std::string reason = one_line(row.reason, 110);
        if (row.cycles) reason += fmt::format(" [{:.0f} cycles", *row.cycles);
        if (row.model_cycles) {
            reason += fmt::format("; model {:.0f}", *row.model_cycles);
            if (row.model_cycles_before) {
                reason += fmt::format(" vs {:.0f} before ({:+.2f}%)", *row.model_cycles_before,
                                      100.0 * (*row.model_cycles / *row.model_cycles_before - 1.0));
            }
        }
        if (row.cycles) reason += "]";
        std::string escaped = "no";
        if (!row.escapes.empty()) {
            escaped.clear();
            for (const auto& escape : row.escapes) escaped += (escaped.empty() ? "" : "; ") + escape;
            escaped = one_line(escaped, 160);
        }
        text += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", row.item.name, row.item.pattern, row.item.expect,
                            verdict, reason, escaped, row.met ? "yes" : "NO");
    }
    text += fmt::format("\ngaming accepted {}/{} (goal 0)\n", report.gaming_accepted, report.gaming_total);
    text += fmt::format("escapes contained {}/{} (goal all)\n", report.escapes_contained, report.escapes_total);
    text += fmt::format("controls accepted {}/{} (goal all); model cycles within tolerance of before: {}/{}\n",
                        report.controls_accepted, report.controls_total, report.controls_cycles_ok,
                        report.controls_cycles_known);
    text += report.goals_met() ? "goals met\n" : "goals NOT met\n";
    return text;
}

}  // namespace npuopt::bench

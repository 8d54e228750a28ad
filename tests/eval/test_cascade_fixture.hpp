#pragma once
// Shared fixture of the cascade tests: a scratch campaign store, a rule book, and the fake
// adversarial toolchain (tests/data/adversarial/fake-npuc-adversarial), whose behaviour each
// kernel file declares in a `// fake-behaviour:` line.

#include <doctest/doctest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/target_config.hpp"
#include "eval/cascade.hpp"
#include "knowledge/rules.hpp"
#include "proc/subprocess.hpp"
#include "store/campaign_store.hpp"
#include "store/database.hpp"
#include "store/knowledge_store.hpp"
#include "target/toolchain.hpp"

namespace cascade_test {

namespace fs = std::filesystem;

/// A private directory under the build dir (not /tmp: the sandbox mounts a tmpfs there).
class TempDir {
public:
    explicit TempDir(const std::string& prefix = "cascade") {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / (prefix + "-XXXXXX")).string();
        REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        m_path = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(m_path, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const fs::path& path() const { return m_path; }

private:
    fs::path m_path;
};

/// The fake target; FAKE_STATE_DIR is a writable directory that outlives one call, FAKE_ARGV_LOG a
/// file in it where fake-npuc-checks logs every run's argv.
inline npuopt::config::TargetConfig fake_target(const fs::path& state_dir,
                                                const std::string& bin = "fake-npuc-adversarial",
                                                const std::string& search_path = "adversarial") {
    npuopt::config::TargetConfig target;
    target.name = "fake";
    target.dir = NPUOPT_TEST_DATA_DIR;
    target.toolchain.bin = bin;
    target.toolchain.search_paths = {search_path};
    target.toolchain.env = {{"FAKE_STATE_DIR", state_dir.string()},
                            {"FAKE_ARGV_LOG", (state_dir / "argv.log").string()}};
    target.toolchain.version = {{"{bin}", "--version"}, 10.0};
    target.toolchain.check = {{"{bin}", "check", "{file}"}, 10.0};
    target.toolchain.schedule = {{"{bin}", "schedule", "{file}", "--kernel", "{kernel}", "--shape", "{shape}"}, 10.0};
    target.toolchain.run = {{"{bin}", "run", "{file}", "--kernel", "{kernel}", "--seed", "{seed}", "--repeat",
                             "{repeat}", "--shape", "{shape}"},
                            3.0};
    return target;
}

/// The fake is trusted test code: no bubblewrap, so the many race launches stay fast.
inline npuopt::proc::SandboxPolicy sandbox_with(const fs::path& writable) {
    npuopt::proc::SandboxPolicy policy;
    policy.enabled = false;
    policy.required = false;
    policy.writable_paths = {writable};
    return policy;
}

/// Which fake toolchain a Campaign runs.
struct FakeToolchain {
    std::string bin = "fake-npuc-adversarial";
    std::string search_path = "adversarial";
};

/// fake-npuc-checks: kernels that are correct only while watched (tests/data/fake-toolchain).
inline FakeToolchain checks_toolchain() { return {"fake-npuc-checks", "fake-toolchain"}; }

/// A campaign: store, rule book, toolchain and designs written as fake kernel files.
struct Campaign {
    TempDir dir;
    fs::path state_dir = dir.path() / "state";
    npuopt::store::CampaignStore store = npuopt::store::CampaignStore::open(dir.path() / "campaign.db");
    npuopt::store::Database kb_database = npuopt::store::Database::open(dir.path() / "kb.db");
    npuopt::store::KnowledgeStore kb_store{kb_database};
    std::int64_t kb_version_id = kb_store.toolchain_version_id("fake", "fake-npuc", "1.0.0");
    npuopt::knowledge::RuleBook rules{kb_store, "fake", "1.0.0"};
    npuopt::target::Toolchain toolchain;
    int next_design = 0;

    explicit Campaign(const FakeToolchain& fake = {})
        : toolchain(fake_target(state_dir, fake.bin, fake.search_path), sandbox_with(state_dir)) {
        fs::create_directories(state_dir);
    }

    /// Lines of FAKE_ARGV_LOG (fake-npuc-checks only): one per run launch.
    std::vector<std::string> argv_log() const {
        std::vector<std::string> lines;
        std::ifstream stream(state_dir / "argv.log");
        for (std::string line; std::getline(stream, line);) lines.push_back(line);
        return lines;
    }

    /// A design whose fake kernel file declares `behaviour`, `cycles` and `estimate`.
    npuopt::eval::Candidate design(const std::string& behaviour, double cycles = 10000, double estimate = 0,
                                   std::map<std::string, double> quantities = {}) {
        const std::string name = fmt::format("{}-{}", behaviour, next_design++);
        const fs::path file = dir.path() / (name + ".rs");
        std::ofstream(file) << "// fake-behaviour: " << behaviour << "\n// fake-cycles: " << static_cast<long>(cycles)
                            << "\n// fake-estimate: " << static_cast<long>(estimate > 0 ? estimate : cycles) << "\n";
        npuopt::store::DesignRecord record;
        record.content_hash = "hash-" + name;
        record.target = "fake";
        record.kernel = "attention_output";
        record.shape = "hidden=256";
        record.template_name = behaviour;
        npuopt::eval::Candidate candidate;
        candidate.design_id = store.record_design(record);
        candidate.content_hash = record.content_hash;
        candidate.kernel = "attention_output";
        candidate.source_file = file;
        candidate.quantities = std::move(quantities);
        return candidate;
    }

    npuopt::eval::KernelContext kernel() const {
        npuopt::eval::KernelContext context;
        context.spec.name = "attention_output";
        context.shape = {{"hidden", 256}};
        context.min_bytes_moved = 0.0;
        return context;
    }

    /// Stage rows of a design, in order.
    std::vector<npuopt::store::EvaluationRecord> evaluations(const npuopt::eval::Candidate& candidate) {
        return store.list_evaluations(candidate.design_id);
    }
};

/// A quick configuration: small calibration, few seeds.
inline npuopt::eval::CascadeConfig quick_config() {
    npuopt::eval::CascadeConfig config;
    config.acceptance.calibration_paths = 4000;
    config.seed = 7;
    return config;
}

}  // namespace cascade_test

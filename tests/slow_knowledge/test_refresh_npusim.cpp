// The knowledge base against the real simulator: ingest knowledge/npu-sim/docs, mine npuc 1.0's
// diagnostics on a few designs, refresh to npuc 1.1 (a renamed DSL function, a relaxed packet
// limit). Skips when the simulator is not built (build*/npu-sim/{1.0,1.1}/bin/npuc).

#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "config/target_loader.hpp"
#include "knowledge/knowledge_base.hpp"
#include "knowledge/refresh.hpp"
#include "store/database.hpp"
#include "target/toolchain.hpp"

namespace fs = std::filesystem;
using namespace npuopt::knowledge;

namespace {

class TempDir {
public:
    TempDir() {
        fs::path base = fs::path(NPUOPT_BUILD_DIR) / "test-tmp";
        fs::create_directories(base);
        std::string pattern = (base / "kb-npusim-XXXXXX").string();
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

bool has_both_releases(const fs::path& root) {
    return ::access((root / "1.0/bin/npuc").c_str(), X_OK) == 0 && ::access((root / "1.1/bin/npuc").c_str(), X_OK) == 0;
}

/// The npu-sim directory holding 1.0/bin/npuc and 1.1/bin/npuc: $NPUOPT_NPUSIM_DIR, this build's,
/// or another build*/ of the source tree.
std::optional<fs::path> find_npusim() {
    if (const char* env = std::getenv("NPUOPT_NPUSIM_DIR"); env != nullptr && has_both_releases(env)) return fs::path(env);
    if (has_both_releases(fs::path(NPUOPT_BUILD_DIR) / "npu-sim")) return fs::path(NPUOPT_BUILD_DIR) / "npu-sim";
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(NPUOPT_SOURCE_DIR, error)) {
        if (entry.is_directory() && entry.path().filename().string().starts_with("build") &&
            has_both_releases(entry.path() / "npu-sim")) {
            return entry.path() / "npu-sim";
        }
    }
    return std::nullopt;
}

npuopt::target::Toolchain npuc(const fs::path& npusim, const std::string& release) {
    auto target = npuopt::config::load_target_config(fs::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/target.yaml");
    target.toolchain.search_paths = {npusim / release / "bin"};
    npuopt::proc::SandboxPolicy sandbox;
    sandbox.enabled = true;
    sandbox.required = false;
    return npuopt::target::Toolchain(target, sandbox);
}

std::string read_file(const fs::path& path) {
    std::ifstream stream(path);
    std::ostringstream buffer;
    buffer << stream.rdbuf();
    return buffer.str();
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
    auto pos = text.find(from);
    REQUIRE_MESSAGE(pos != std::string::npos, "the baseline no longer contains: " << from);
    return text.replace(pos, from.size(), to);
}

}  // namespace

TEST_CASE("npu-sim: docs ingested / rules mined from npuc 1.0 / refresh to 1.1 retires / keeps and adds rules") {
    auto npusim = find_npusim();
    if (!npusim) {
        MESSAGE("SKIPPED: npu-sim is not built (no build*/npu-sim/{1.0,1.1}/bin/npuc)");
        return;
    }
    TempDir dir;
    auto database = npuopt::store::Database::open(dir.path() / "kb.db");
    auto v10 = npuc(*npusim, "1.0");
    auto v11 = npuc(*npusim, "1.1");
    KnowledgeBase kb = KnowledgeBase::for_target(database, v10.target());

    auto started = std::chrono::steady_clock::now();
    RefreshReport build = refresh(kb, v10);
    REQUIRE(build.new_version == "1.0.0");
    CHECK(build.ingest.doc_set == "1.0");
    CHECK(build.ingest.sections > 10);
    CHECK(build.ingest.claims_kept > 10);
    MESSAGE("npuc 1.0 docs: " << build.ingest.sections << " sections, " << build.ingest.claims_kept
                               << " claims kept, " << build.ingest.claims_dropped << " dropped by the check");

    // Designs: a packet above 1.0's limit (accepted by 1.1), a DM overflow (rejected by both), and the
    // official baseline with oversized passes, which calls the DSL function 1.1 renames.
    const std::string baseline =
        read_file(fs::path(NPUOPT_SOURCE_DIR) / "dsl_templates/npu-sim/baseline_attention_output.rs");
    REQUIRE(baseline.find("k.vtrf(") != std::string::npos);
    const std::string kernel_head = "use npu::*;\nfn ao(k: &mut Ctx) {\n";
    const std::string kernel_tail = "}\nnpu::kernels! { attention_output => ao }\n";
    const std::vector<std::pair<std::string, std::string>> designs = {
        {"big_packet", kernel_head + "    let attn = k.tensor(\"attn\");\n    let d = k.dm_alloc(0, 16384);\n"
                                     "    let t = k.copy(engine(0, 0), attn.at(0), d.at(0), 8192, 8192);\n"
                                     "    k.wait(t);\n" + kernel_tail},
        {"dm_overflow", kernel_head + "    let _d = k.dm_alloc(0, 600000);\n" + kernel_tail},
        {"baseline_rows256", replaced(baseline, "const ROWS: u32 = 16;", "const ROWS: u32 = 256;")},
    };
    for (const auto& [name, source] : designs) {
        fs::path file = dir.path() / (name + ".rs");
        std::ofstream(file) << source;
        auto result = v10.check(file);
        REQUIRE_MESSAGE(result.call.status == npuopt::target::CallStatus::failed, result.call.message);
        kb.rules().mine_diagnostics(result.diagnostics, DesignRef{name, file, {}}, "check");
    }
    auto rules10 = kb.rules().list();
    MESSAGE("npuc 1.0 rules: " << kb.rules().render_text());
    CHECK(kb.rules().check_quantities({{"packet_bytes", 8192.0}}).size() == 1);

    RefreshReport report = refresh(kb, v11);
    auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    MESSAGE(report.diff.to_markdown());
    MESSAGE("build + mine + refresh took " << elapsed << " s");
    CHECK(report.old_version == "1.0.0");
    CHECK(report.new_version == "1.1.0");
    CHECK(report.ingest.doc_set == "1.1");
    CHECK(report.rules_retired >= 1);   // E0101: 1.1 accepts the 8192-byte packet
    CHECK(report.rules_kept >= 1);      // E0201: still rejected
    CHECK(report.rules_unverified >= 1);  // E0203: its evidence now stops at the rename
    bool rename_added = false;
    for (const auto& change : report.diff.rules_added) rename_added = rename_added || change.code == "E0401";
    CHECK(rename_added);
    bool packet_retired = false;
    for (const auto& change : report.diff.rules_retired) packet_retired = packet_retired || change.code == "E0101";
    CHECK(packet_retired);
    CHECK_FALSE(report.diff.sections_changed.empty());
    CHECK(kb.rules().check_quantities({{"packet_bytes", 8192.0}}).empty());
    CHECK(kb.rules().check_quantities({{"dm_bytes", 600000.0}}).size() == 1);

    auto hits = kb.search("vtrf renamed to_trf", 5);
    REQUIRE_FALSE(hits.empty());
    CHECK_FALSE(hits[0].stale);
    bool stale_doc_seen = false;
    for (const auto& hit : kb.search("packet bytes", 30)) stale_doc_seen = stale_doc_seen || hit.stale;
    CHECK(stale_doc_seen);
}

// The database's faults: an empty, truncated or foreign file is an error that names it and changes
// nothing; a read-only or full database says so and names the file; a read-only campaign can still
// be read (status). Full disks and read-only file systems are real tmpfs mounts where this process
// may mount them (root with CAP_SYS_ADMIN), else SQLite's max_page_count and a read-only open.

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "store/campaign_store.hpp"

using namespace npuopt;
using namespace npuopt::store;
namespace fs = std::filesystem;

namespace {

struct ScratchDir {
    fs::path dir;
    ScratchDir() {
        std::random_device random;
        dir = fs::temp_directory_path() / ("npuopt-store-faults-" + std::to_string(random()));
        fs::create_directories(dir);
    }
    ~ScratchDir() {
        std::error_code ignored;
        fs::permissions(dir, fs::perms::owner_all, fs::perm_options::add, ignored);
        fs::remove_all(dir, ignored);
    }
};

/// A tmpfs mounted at `dir` for the life of the object, when this process may mount one.
struct TmpfsMount {
    fs::path dir;
    bool mounted = false;
    TmpfsMount(fs::path where, const std::string& size) : dir(std::move(where)) {
        fs::create_directories(dir);
        const std::string command = "mount -t tmpfs -o size=" + size + " tmpfs '" + dir.string() + "' 2>/dev/null";
        mounted = std::system(command.c_str()) == 0;
    }
    bool remount_read_only() const {
        return std::system(("mount -o remount,ro '" + dir.string() + "' 2>/dev/null").c_str()) == 0;
    }
    ~TmpfsMount() {
        if (mounted) (void)std::system(("umount -l '" + dir.string() + "' 2>/dev/null").c_str());
    }
};

std::string read_bytes(const fs::path& file) {
    std::ifstream stream(file, std::ios::binary);
    std::stringstream text;
    text << stream.rdbuf();
    return text.str();
}

std::string open_error(const fs::path& file, Database::Options options = {}) {
    try {
        auto database = Database::open(file, options);
    } catch (const Error& error) {
        CHECK(error.kind() == ErrorKind::store);
        return error.what();
    }
    return {};
}

/// A campaign database with some rows, closed (its WAL checkpointed into the file).
void make_campaign_db(const fs::path& file, int designs = 50) {
    auto store = CampaignStore::open(file);
    for (int design_idx = 0; design_idx < designs; ++design_idx) {
        DesignRecord design;
        design.content_hash = "hash-" + std::to_string(design_idx);
        design.target = "npu-sim";
        design.kernel = "feedforward";
        design.shape = "hidden=3840";
        design.template_name = "ff";
        design.source = std::string(2000, 'x');
        store.record_design(design);
    }
    store.set_meta("target", "npu-sim");
}

}  // namespace

TEST_CASE("a zero-byte campaign.db is an error naming the file and is not re-initialised") {
    ScratchDir scratch;
    const fs::path file = scratch.dir / "campaign.db";
    std::ofstream(file).close();
    for (const bool create : {true, false}) {
        Database::Options options;
        options.create = create;
        const std::string message = open_error(file, options);
        INFO(message);
        CHECK(message.find(file.string()) != std::string::npos);
        CHECK(message.find("empty (0 bytes)") != std::string::npos);
        CHECK(fs::file_size(file) == 0);
        CHECK_FALSE(fs::exists(scratch.dir / "campaign.db-wal"));
    }
}

TEST_CASE("a truncated or foreign campaign.db is an error naming the file and stays byte for byte the same") {
    ScratchDir scratch;
    const fs::path file = scratch.dir / "campaign.db";
    make_campaign_db(file);
    const std::string whole = read_bytes(file);
    REQUIRE(whole.size() > 3 * 4096);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << whole.substr(0, whole.size() / 2);
    const std::string truncated = read_bytes(file);
    const std::string message = open_error(file);
    INFO(message);
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find("truncated") != std::string::npos);
    CHECK(read_bytes(file) == truncated);

    std::ofstream(file, std::ios::binary | std::ios::trunc) << "this is not a database, it is a text file\n";
    const std::string foreign = open_error(file);
    INFO(foreign);
    CHECK(foreign.find("not an SQLite database") != std::string::npos);
    CHECK(read_bytes(file) == "this is not a database, it is a text file\n");
}

TEST_CASE("a damaged page is reported as damaged with the file's name") {
    ScratchDir scratch;
    const fs::path file = scratch.dir / "campaign.db";
    make_campaign_db(file, 200);
    std::string bytes = read_bytes(file);
    REQUIRE(bytes.size() > 8 * 4096);
    for (std::size_t at = 2 * 4096; at < 6 * 4096; ++at) bytes[at] = static_cast<char>(0xA5);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    std::string message;
    try {
        auto store = CampaignStore::open(file);
        store.list_designs("npu-sim", "feedforward");
        const std::string integrity = store.database().integrity_check();
        if (integrity != "ok") message = "integrity: " + integrity;
    } catch (const Error& error) {
        message = error.what();
    }
    INFO(message);
    CHECK_FALSE(message.empty());
    if (message.rfind("integrity: ", 0) != 0) {
        CHECK(message.find(file.string()) != std::string::npos);
        CHECK(message.find("damaged") != std::string::npos);
    }
}

TEST_CASE("a write to a read-only database names the file and says read-only") {
    ScratchDir scratch;
    const fs::path file = scratch.dir / "campaign.db";
    make_campaign_db(file);
    Database::Options options;
    options.read_only = true;
    auto store = CampaignStore::open(file, options);
    CHECK(store.database().read_only());
    CHECK(store.meta("target") == std::optional<std::string>("npu-sim"));
    std::string message;
    try {
        store.set_meta("target", "other");
    } catch (const Error& error) {
        message = error.what();
        CHECK(error.kind() == ErrorKind::store);
    }
    INFO(message);
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find("read-only") != std::string::npos);
}

TEST_CASE("a campaign on a read-only file system (or a read-only file and directory) can still be read") {
    ScratchDir scratch;
    TmpfsMount mount(scratch.dir / "ro", "4m");
    const fs::path dir = mount.mounted ? mount.dir : scratch.dir / "ro";
    const fs::path file = dir / "campaign.db";
    make_campaign_db(file);
    bool file_system_read_only = mount.mounted && mount.remount_read_only();
    std::error_code ignored;  // on a read-only mount chmod fails, and need not succeed
    fs::permissions(file, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read, ignored);
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec, ignored);
    if (!file_system_read_only) MESSAGE("no read-only mount here: chmod only (root can still write)");
    Database::Options options;
    options.read_only = true;
    auto store = CampaignStore::open(file, options);
    CHECK(store.meta("target") == std::optional<std::string>("npu-sim"));
    CHECK(store.list_designs("npu-sim", "feedforward").size() == 50);
    const StoreSummary summary = store.summarize();
    CHECK(summary.designs_by_kernel.at("feedforward") == 50);
    if (file_system_read_only) {
        // the writable open fails with the file named and the cause said
        const std::string message = open_error(file);
        INFO(message);
        CHECK(message.find(file.string()) != std::string::npos);
        CHECK(message.find("read-only") != std::string::npos);
    }
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::add, ignored);
}

TEST_CASE("a full disk names the file and says disk full, what was committed before stays") {
    ScratchDir scratch;
    TmpfsMount mount(scratch.dir / "small", "2m");
    const fs::path file = (mount.mounted ? mount.dir : scratch.dir) / "campaign.db";
    auto store = CampaignStore::open(file);
    store.set_meta("target", "npu-sim");
    if (!mount.mounted) {
        MESSAGE("no tmpfs here: the disk is made full with PRAGMA max_page_count");
        const auto pages = as_int(store.database().query("PRAGMA page_count").at(0).at(0));
        store.database().query("PRAGMA max_page_count = " + std::to_string(pages + 8));
    }
    std::string message;
    int designs = 0;
    try {
        for (; designs < 100000; ++designs) {
            DesignRecord design;
            design.content_hash = "hash-" + std::to_string(designs);
            design.target = "npu-sim";
            design.kernel = "feedforward";
            design.shape = "hidden=3840";
            design.template_name = "ff";
            design.source = std::string(4000, 'y');
            store.record_design(design);
        }
    } catch (const Error& error) {
        message = error.what();
        CHECK(error.kind() == ErrorKind::store);
    }
    INFO(message);
    REQUIRE_FALSE(message.empty());
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find("disk full") != std::string::npos);
    CHECK(store.meta("target") == std::optional<std::string>("npu-sim"));
    CHECK(static_cast<int>(store.list_designs("npu-sim", "feedforward").size()) == designs);
}

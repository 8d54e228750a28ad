// The live dashboard (report/dashboard.hpp): its state from the database, the HTTP server's
// endpoints, long-poll and access rules, and the page itself in headless Chromium — it loads,
// shows the champion, and redraws itself when a step lands, without a reload.

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "../search/search_test_util.hpp"
#include "core/error.hpp"
#include "proc/subprocess.hpp"
#include "report/dashboard.hpp"
#include "store/tree_store.hpp"

using namespace npuopt;
using npuopt::test::ScratchDir;

namespace {

/// A campaign with one kernel, `gemv`, whose steps the test adds one by one.
struct LiveCampaign {
    ScratchDir dir{"dashboard"};
    store::CampaignStore store = store::CampaignStore::open(dir.path / "campaign.db");
    std::int64_t step = 0;
    std::int64_t device_runs = 0;
    std::optional<std::int64_t> champion;

    LiveCampaign() {
        store::TreeStore trees(store.database());
        trees.set_state("run", R"({"state":"running","pid":1,"started_at":"2026-12-01T10:00:00.000Z"})");
        trees.set_state("kernel/gemv", R"({"status":"active","sol_cycles":400,"shape":"n=64"})");
        add_step("baseline", "baseline", "{}", "accepted", 10000);
    }

    std::int64_t add_step(const std::string& role, const std::string& template_name, const std::string& params,
                          const std::string& verdict, double cycles) {
        step += 1;
        device_runs += 4;
        store::DesignRecord design;
        design.content_hash = fmt::format("hash-{}", step);
        design.target = "chip";
        design.kernel = "gemv";
        design.shape = "n=64";
        design.template_name = template_name;
        design.params_json = params;
        const std::int64_t design_id = store.record_design(design);
        store::TreeStore trees(store.database());
        store::TreeEdgeRecord edge;
        edge.kernel = "gemv";
        edge.design_id = design_id;
        edge.parent_design_id = champion;
        edge.role = role;
        edge.move = role == "baseline" ? "" : fmt::format("step {} move", step);
        edge.step = step;
        edge.verdict = verdict;
        edge.cycles = cycles;
        edge.device_runs = 4;
        edge.created_at = fmt::format("2026-12-01T10:{:02d}:00.000Z", static_cast<int>(step));
        trees.record_edge(edge);
        if (verdict == "accepted") {
            store::ChampionRecord link;
            link.kernel = "gemv";
            link.design_id = design_id;
            link.step = step;
            link.cycles = cycles;
            trees.push_champion(link);
            champion = design_id;
        }
        trees.set_state("counters", fmt::format(R"({{"step":{},"device_runs":{}}})", step, device_runs));
        return design_id;
    }
};

/// The dashboard serving `campaign_dir` on a free loopback port, from a thread of its own.
struct RunningServer {
    report::DashboardServer server;
    int port = 0;
    std::thread thread;

    explicit RunningServer(report::DashboardOptions options) : server(adjusted(std::move(options))) {
        port = server.bind();
        thread = std::thread([this] { server.serve(); });
        httplib::Client probe("127.0.0.1", port);
        for (int attempt = 0; attempt < 100; ++attempt) {
            if (probe.Get("/healthz")) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    ~RunningServer() {
        server.stop();
        thread.join();
    }
    static report::DashboardOptions adjusted(report::DashboardOptions options) {
        options.port = 0;
        return options;
    }
    httplib::Client client() const {
        httplib::Client out("127.0.0.1", port);
        out.set_read_timeout(30, 0);
        return out;
    }
};

report::DashboardOptions options_for(const std::filesystem::path& dir) {
    report::DashboardOptions options;
    options.campaign_dir = dir;
    options.max_wait_secs = 5.0;
    options.poll_secs = 0.05;
    return options;
}

double secs_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Chromium or Chrome on PATH ($NPUOPT_CHROMIUM first); empty when there is none.
std::string find_chromium() {
    if (const char* given = std::getenv("NPUOPT_CHROMIUM"); given && *given) return given;
    const char* path = std::getenv("PATH");
    for (const char* name : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
        if (auto found = proc::find_executable(name, path ? path : "/usr/bin:/bin")) return found->string();
    }
    return {};
}

}  // namespace

TEST_CASE("dashboard state: the champion, its plot and the latest steps come from the database") {
    LiveCampaign campaign;
    campaign.add_step("tuner", "gemv_tiled", R"({"T":8})", "rejected", 12000);
    campaign.add_step("architect", "gemv_tiled", R"({"T":4})", "accepted", 5000);

    const nlohmann::json state = report::dashboard_state(campaign.store);
    REQUIRE(state["kernels"].size() == 1);
    const auto& gemv = state["kernels"][0];
    CHECK(gemv["kernel"] == "gemv");
    CHECK(gemv["champion_cycles"].get<double>() == doctest::Approx(5000));
    CHECK(gemv["speedup"].get<double>() == doctest::Approx(2.0));
    CHECK(gemv["percent_of_speed_of_light"].get<double>() == doctest::Approx(8.0));
    CHECK(gemv["champion"].get<std::string>().find("gemv_tiled") != std::string::npos);
    const std::string plot = gemv["plot"];
    CHECK(plot.find("<svg") == 0);
    CHECK(plot.find(R"(data-kernel="gemv")") != std::string::npos);
    REQUIRE(state["recent"].size() == 3);
    CHECK(state["recent"][0]["step"] == 3);  // newest first
    CHECK(state["recent"][1]["verdict"] == "rejected");
    CHECK(state["recent"][2]["role"] == "baseline");
    CHECK(state["status"]["steps"] == 3);

    const std::string before = report::dashboard_version(campaign.store);
    CHECK(state["version"] == before);
    campaign.add_step("tuner", "gemv_tiled", R"({"T":2})", "rejected", 7000);
    CHECK(report::dashboard_version(campaign.store) != before);

    CHECK(report::dashboard_state(campaign.store, 2)["recent"].size() == 2);
}

TEST_CASE("dashboard server: the page, its script and the state over HTTP, read-only") {
    LiveCampaign campaign;
    const auto db_file = campaign.dir.path / "campaign.db";
    const auto size_before = std::filesystem::file_size(db_file);
    RunningServer running(options_for(campaign.dir.path));
    auto client = running.client();

    auto page = client.Get("/");
    REQUIRE(page);
    CHECK(page->status == 200);
    CHECK(page->get_header_value("Content-Type").find("text/html") == 0);
    CHECK(page->body.find(R"(<script src="app.js">)") != std::string::npos);
    CHECK(page->get_header_value("Cache-Control") == "no-store");
    auto script = client.Get("/app.js");
    REQUIRE(script);
    CHECK(script->body.find("api/wait?since=") != std::string::npos);

    auto state = client.Get("/api/state");
    REQUIRE(state);
    REQUIRE(state->status == 200);
    const auto body = nlohmann::json::parse(state->body);
    CHECK(body["kernels"][0]["champion_cycles"].get<double>() == doctest::Approx(10000));
    CHECK(body["dir"] == campaign.dir.path.string());

    auto missing = client.Get("/nothing-here");
    REQUIRE(missing);
    CHECK(missing->status == 404);
    CHECK(nlohmann::json::parse(missing->body)["message"].get<std::string>().find("/nothing-here") !=
          std::string::npos);

    CHECK(std::filesystem::file_size(db_file) == size_before);
    CHECK(running.server.requests("/api/state") == 1);
    CHECK(running.server.requests() >= 4);
}

TEST_CASE("dashboard server: a held request returns when a step lands, or after its timeout") {
    LiveCampaign campaign;
    RunningServer running(options_for(campaign.dir.path));
    auto client = running.client();
    const std::string version = report::dashboard_version(campaign.store);

    // A version the client has not seen: at once.
    auto start = std::chrono::steady_clock::now();
    auto fresh = client.Get("/api/wait?since=none&timeout=5");
    REQUIRE(fresh);
    CHECK(secs_since(start) < 2.0);
    CHECK(nlohmann::json::parse(fresh->body)["version"] == version);

    // The current version and nothing happens: held until the timeout, same state.
    const std::string same = "/api/wait?timeout=0.6&since=" + httplib::detail::encode_query_param(version);
    start = std::chrono::steady_clock::now();
    auto held = client.Get(same.c_str());
    REQUIRE(held);
    CHECK(secs_since(start) >= 0.5);
    CHECK(nlohmann::json::parse(held->body)["version"] == version);

    // The current version and a step lands meanwhile: returned with the new state.
    std::thread writer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        campaign.add_step("architect", "gemv_tiled", R"({"T":4})", "accepted", 4000);
    });
    const std::string waiting = "/api/wait?timeout=5&since=" + httplib::detail::encode_query_param(version);
    start = std::chrono::steady_clock::now();
    auto updated = client.Get(waiting.c_str());
    writer.join();
    REQUIRE(updated);
    CHECK(secs_since(start) < 4.0);
    const auto body = nlohmann::json::parse(updated->body);
    CHECK(body["version"] != version);
    CHECK(body["kernels"][0]["champion_cycles"].get<double>() == doctest::Approx(4000));

    auto bad = client.Get("/api/wait?since=x&timeout=soon");
    REQUIRE(bad);
    CHECK(bad->status == 400);
}

TEST_CASE("dashboard server: loopback answers only loopback Host names, and a token is asked for when set") {
    LiveCampaign campaign;
    auto options = options_for(campaign.dir.path);
    options.token = "0123456789abcdef0123456789abcdef";
    RunningServer running(options);
    auto client = running.client();

    httplib::Headers rebinding = {{"Host", "attacker.example:8765"}};
    auto forbidden = client.Get("/api/state", rebinding);
    REQUIRE(forbidden);
    CHECK(forbidden->status == 403);

    auto without = client.Get("/api/state");
    REQUIRE(without);
    CHECK(without->status == 401);
    CHECK(nlohmann::json::parse(without->body)["kind"] == "unauthorized");
    auto wrong = client.Get("/api/state?token=0123456789abcdef0123456789abcdee");
    REQUIRE(wrong);
    CHECK(wrong->status == 401);

    auto with_query = client.Get(("/?token=" + options.token).c_str());
    REQUIRE(with_query);
    CHECK(with_query->status == 200);
    const std::string cookie = with_query->get_header_value("Set-Cookie");
    CHECK(cookie.find("npuopt_dashboard_token=" + options.token) == 0);
    CHECK(cookie.find("HttpOnly") != std::string::npos);

    auto with_bearer = client.Get("/api/state", {{"Authorization", "Bearer " + options.token}});
    REQUIRE(with_bearer);
    CHECK(with_bearer->status == 200);
    auto with_cookie = client.Get("/api/state", {{"Cookie", "other=1; npuopt_dashboard_token=" + options.token}});
    REQUIRE(with_cookie);
    CHECK(with_cookie->status == 200);
    CHECK(running.server.url().find("?token=" + options.token) != std::string::npos);
}

TEST_CASE("dashboard server: beyond loopback only with allow_remote, and then always with a token") {
    LiveCampaign campaign;
    auto options = options_for(campaign.dir.path);
    options.bind_address = "0.0.0.0";
    options.port = 0;
    {
        report::DashboardServer refused(options);
        try {
            refused.bind();
            FAIL("a non-loopback bind without allow_remote was accepted");
        } catch (const Error& error) {
            CHECK(error.kind() == ErrorKind::invalid_input);
            CHECK(std::string(error.what()).find("--allow-remote") != std::string::npos);
        }
    }
    options.allow_remote = true;
    report::DashboardServer remote(options);
    const int port = remote.bind();
    CHECK(port > 0);
    const std::string url = remote.url();
    const auto at = url.find("?token=");
    REQUIRE(at != std::string::npos);
    CHECK(url.size() - at - 7 == 32);  // a generated token
}

TEST_CASE("dashboard server: not a campaign, a damaged database and a port in use are errors that name them") {
    ScratchDir empty("dashboard-empty");
    report::DashboardServer no_campaign(options_for(empty.path));
    CHECK_THROWS_WITH_AS(no_campaign.bind(), doctest::Contains("is not a campaign directory"), Error);

    ScratchDir damaged("dashboard-damaged");
    std::ofstream(damaged.path / "campaign.db") << "this is not an SQLite database, it only has the name of one";
    report::DashboardServer broken(options_for(damaged.path));
    CHECK_THROWS_AS(broken.bind(), Error);

    LiveCampaign campaign;
    RunningServer running(options_for(campaign.dir.path));
    auto options = options_for(campaign.dir.path);
    options.port = running.port;
    report::DashboardServer second(options);
    CHECK_THROWS_WITH_AS(second.bind(), doctest::Contains("cannot listen on"), Error);
}

TEST_CASE("dashboard: loopback addresses") {
    CHECK(report::is_loopback_address("127.0.0.1"));
    CHECK(report::is_loopback_address("127.1.2.3"));
    CHECK(report::is_loopback_address("::1"));
    CHECK(report::is_loopback_address("localhost"));
    CHECK_FALSE(report::is_loopback_address("0.0.0.0"));
    CHECK_FALSE(report::is_loopback_address("192.168.1.10"));
    CHECK_FALSE(report::is_loopback_address("::"));
    CHECK_FALSE(report::is_loopback_address("localhost.attacker.example"));
    CHECK(report::random_token() != report::random_token());
}

TEST_CASE("dashboard in headless Chromium: the page loads, shows the champion and redraws after a new step") {
    const std::string chromium = find_chromium();
    if (chromium.empty()) {
        if (std::getenv("NPUOPT_REQUIRE_CHROMIUM")) FAIL("NPUOPT_REQUIRE_CHROMIUM is set but no chromium is on PATH");
        MESSAGE("no chromium on PATH (apt-get install chromium): the browser test is skipped");
        return;
    }
    LiveCampaign campaign;
    auto options = options_for(campaign.dir.path);
    options.max_wait_secs = 0.5;  // the page's polls come back quickly, so that virtual time runs on
    RunningServer running(options);
    ScratchDir profile("dashboard-chromium");

    // After the page's first state arrives, a step lands with a new champion.
    std::thread writer([&] {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (running.server.requests("/api/wait") < 1 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        campaign.add_step("architect", "gemv_streamed", R"({"ROWS":48})", "accepted", 2500);
    });

    proc::Command command;
    command.argv = {chromium,
                    "--headless",
                    "--no-sandbox",  // as root, Chromium refuses its own sandbox
                    "--disable-gpu",
                    "--no-first-run",
                    "--user-data-dir=" + profile.path.string(),
                    "--virtual-time-budget=4000",
                    "--dump-dom",
                    fmt::format("http://127.0.0.1:{}/?wait=0.5", running.port)};
    command.env = {{"HOME", profile.path.string()}, {"PATH", "/usr/bin:/bin"}};
    command.limits.timeout_secs = 120;
    command.limits.output_cap_bytes = 4 << 20;
    command.sandbox.enabled = false;
    const proc::Result result = proc::run(command);
    writer.join();
    INFO("chromium stderr: " << result.stderr_text.substr(0, 2000));
    REQUIRE(result.exit_code.has_value());
    CHECK(*result.exit_code == 0);
    const std::string& dom = result.stdout_text;

    CHECK(dom.find(R"(id="kernel-gemv")") != std::string::npos);
    CHECK(dom.find("gemv_streamed") != std::string::npos);  // the champion after the new step
    CHECK(dom.find(">2500<") != std::string::npos);         // its cycles
    CHECK(dom.find(">4.000x<") != std::string::npos);       // speedup over the baseline
    CHECK(dom.find(R"(class="plot progress-runs")") != std::string::npos);
    CHECK(dom.find("live: updated") != std::string::npos);
    const auto updates_at = dom.find("data-updates=\"");
    REQUIRE(updates_at != std::string::npos);
    CHECK(std::stoi(dom.substr(updates_at + 14)) >= 2);  // drawn once on load, again after the step
    CHECK(running.server.requests("/") == 1);            // … without a reload
    CHECK(running.server.requests("/api/wait") >= 2);
}

// `npuopt serve DIR`: the live dashboard (report/dashboard) until SIGINT or SIGTERM.

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "report/dashboard.hpp"

namespace npuopt::cli {

int run_serve(const GlobalOptions& global, const ServeOptions& options) {
    report::DashboardOptions dashboard;
    dashboard.campaign_dir = std::filesystem::absolute(options.dir).lexically_normal();
    dashboard.bind_address = options.bind;
    dashboard.port = options.port;
    dashboard.allow_remote = options.allow_remote;
    if (const char* token = std::getenv("NPUOPT_DASHBOARD_TOKEN"); token && *token) dashboard.token = token;
    if (options.require_token && dashboard.token.empty()) dashboard.token = report::random_token();

    report::DashboardServer server(dashboard);
    const int port = server.bind();
    if (global.json) {
        std::cout << nlohmann::json{{"event", "listening"},
                                    {"url", server.url()},
                                    {"port", port},
                                    {"campaign", dashboard.campaign_dir.string()}}
                         .dump()
                  << std::endl;
    } else {
        std::cout << fmt::format("dashboard of {} at {}\n(read-only; Ctrl-C stops)", dashboard.campaign_dir.string(),
                                 server.url())
                  << std::endl;
    }
    std::atomic<bool> served{true};
    std::atomic<bool> listening{true};
    std::thread listener([&] {
        served = server.serve();
        listening = false;
    });
    while (!interrupted()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!listening) break;
    }
    server.stop();
    listener.join();
    if (!served) throw Error(ErrorKind::io, fmt::format("the dashboard's server on port {} stopped", port));
    if (global.json) {
        std::cout << nlohmann::json{{"event", "stopped"}}.dump() << std::endl;
    } else {
        std::cout << "dashboard stopped" << std::endl;
    }
    return k_exit_ok;
}

}  // namespace npuopt::cli

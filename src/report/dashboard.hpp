#pragma once
// `npuopt serve C`: a live dashboard of a campaign, served over HTTP from the campaign database
// opened read-only on every request, so that it runs beside `npuopt run` and never changes what
// the campaign recorded. The page (one HTML document and its script, no external resources)
// long-polls /api/wait and redraws itself when a step lands; no reload.
//
// Endpoints: /  the page · /app.js  its script · /api/state  the state as JSON ·
// /api/wait?since=VERSION&timeout=SECS  the state once its version differs from VERSION (or the
// same state after SECS) · /healthz.
//
// Access: the server binds 127.0.0.1 unless told otherwise; on loopback it answers only requests
// whose Host names the loopback address it listens on (no DNS rebinding). Any other address needs
// `allow_remote` and a token, which every request must carry (`?token=`, `Authorization: Bearer`,
// or the cookie the page is given on its first authorised load).

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "store/campaign_store.hpp"

namespace npuopt::report {

/// The dashboard's view of a campaign, from the database alone: the campaign's status (as
/// `npuopt status --json` gives it), each kernel's best-so-far plot (SVG), the latest steps, and
/// `version`, which changes whenever a step lands or the run's state changes.
nlohmann::json dashboard_state(store::CampaignStore& store, std::size_t recent_steps = 15);

/// The version key of the campaign's state, cheap to compute (see dashboard_state).
std::string dashboard_version(store::CampaignStore& store);

/// Whether `address` is a loopback address or the name "localhost".
bool is_loopback_address(const std::string& address);

/// A token of 32 hexadecimal digits from the system's random source.
std::string random_token();

struct DashboardOptions {
    std::filesystem::path campaign_dir;
    std::string bind_address = "127.0.0.1";
    int port = 8765;               ///< 0: any free port
    bool allow_remote = false;     ///< needed to bind beyond loopback
    std::string token;             ///< required on every request when not empty (always, beyond loopback)
    double max_wait_secs = 25.0;   ///< the longest a /api/wait request is held
    double poll_secs = 0.25;       ///< how often a held request re-reads the database
};

/// The HTTP server. bind() checks the options and the campaign and takes the port; serve() answers
/// requests until stop() (from any thread or a signal poller).
class DashboardServer {
public:
    explicit DashboardServer(DashboardOptions options);
    ~DashboardServer();
    DashboardServer(const DashboardServer&) = delete;
    DashboardServer& operator=(const DashboardServer&) = delete;

    /// Validate the options (Error invalid_input: remote without allow_remote or token; not a
    /// campaign directory), bind, and return the port. Error io when the port cannot be bound.
    int bind();
    /// Answer requests until stop(); returns false when the server failed.
    bool serve();
    void stop();

    /// http://ADDRESS:PORT/ (after bind), with ?token=… when a token is set.
    std::string url(bool with_token = true) const;
    /// Requests received so far for `path` ("/", "/api/wait", …), or for every path when empty.
    std::int64_t requests(const std::string& path = "") const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace npuopt::report

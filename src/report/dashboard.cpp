#include "report/dashboard.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>

#include "campaign/driver.hpp"
#include "core/error.hpp"
#include "report/campaign_series.hpp"
#include "report/progress_plot.hpp"
#include "store/tree_store.hpp"

namespace npuopt::report {

namespace fs = std::filesystem;

namespace {

constexpr const char* k_campaign_db = "campaign.db";
constexpr const char* k_token_cookie = "npuopt_dashboard_token";

std::optional<double> finite_or_none(const std::optional<double>& value) {
    if (value && std::isfinite(*value)) return value;
    return std::nullopt;
}

nlohmann::json optional_json(const std::optional<double>& value) {
    auto finite = finite_or_none(value);
    return finite ? nlohmann::json(*finite) : nlohmann::json(nullptr);
}

nlohmann::json kernel_json(const campaign::KernelStatus& kernel, const KernelSeries* series, const TimeUnit& unit) {
    nlohmann::json out = {{"kernel", kernel.kernel},
                          {"status", kernel.status},
                          {"reason", kernel.reason},
                          {"shape", kernel.shape},
                          {"champion", kernel.champion},
                          {"champion_cycles", optional_json(kernel.champion_cycles)},
                          {"reference", kernel.reference},
                          {"reference_cycles", optional_json(kernel.baseline_cycles)},
                          {"speedup", kernel.speedup},
                          {"minimum_cycles", kernel.sol_cycles},
                          {"percent_of_speed_of_light", 100.0 * kernel.sol_fraction},
                          {"designs", kernel.designs},
                          {"accepted", kernel.accepted}};
    out["plot"] = series && !series->progress.empty() ? progress_svg(*series, false, unit) : std::string();
    return out;
}

/// The latest `count` steps of every kernel, newest first.
nlohmann::json recent_json(store::CampaignStore& store, const std::vector<campaign::KernelStatus>& kernels,
                           std::size_t count) {
    store::TreeStore trees(store.database());
    std::vector<store::TreeEdgeRecord> edges;
    for (const auto& kernel : kernels) {
        for (auto& edge : trees.list_edges(kernel.kernel)) edges.push_back(std::move(edge));
    }
    std::sort(edges.begin(), edges.end(), [](const store::TreeEdgeRecord& a, const store::TreeEdgeRecord& b) {
        return a.step != b.step ? a.step > b.step : a.id > b.id;
    });
    if (edges.size() > count) edges.resize(count);
    nlohmann::json out = nlohmann::json::array();
    for (const auto& edge : edges) {
        out.push_back({{"step", edge.step},
                       {"kernel", edge.kernel},
                       {"role", edge.role},
                       {"move", edge.move},
                       {"verdict", edge.verdict},
                       {"cycles", optional_json(edge.cycles)},
                       {"speedup", optional_json(edge.speedup)},
                       {"device_runs", edge.device_runs},
                       {"at", edge.created_at}});
    }
    return out;
}

/// Constant-time comparison, so that a wrong token's timing says nothing about the right one.
bool same_secret(const std::string& given, const std::string& expected) {
    unsigned char difference = given.size() == expected.size() ? 0 : 1;
    for (std::size_t idx = 0; idx < given.size(); ++idx)
        difference |= static_cast<unsigned char>(given[idx] ^ expected[idx % std::max<std::size_t>(1, expected.size())]);
    return difference == 0;
}

/// The name in a Host header: "127.0.0.1:8765" → 127.0.0.1, "[::1]:8765" → ::1.
std::string host_name(const std::string& header) {
    if (!header.empty() && header.front() == '[') {
        const auto close = header.find(']');
        return close == std::string::npos ? header : header.substr(1, close - 1);
    }
    return header.substr(0, header.find(':'));
}

std::string cookie_value(const std::string& cookies, const std::string& name) {
    const std::string key = name + "=";
    std::size_t at = 0;
    while (at < cookies.size()) {
        while (at < cookies.size() && (cookies[at] == ' ' || cookies[at] == ';')) ++at;
        const auto end = cookies.find(';', at);
        const std::string item = cookies.substr(at, end == std::string::npos ? std::string::npos : end - at);
        if (item.rfind(key, 0) == 0) return item.substr(key.size());
        if (end == std::string::npos) break;
        at = end + 1;
    }
    return {};
}

// The page: no external resources, every text set through textContent; the plots are SVG drawn
// by the server (report/progress_plot), its own escaping.
constexpr const char* k_page = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>npuopt dashboard</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 0.2em 0; }
#connection { font-size: 0.9em; color: #666; }
#connection.error { color: #b00; }
table { border-collapse: collapse; margin: 0.8em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3em 0.8em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.champion { max-width: 28em; overflow-wrap: anywhere; font-family: monospace; font-size: 0.9em; }
.summary span { margin-right: 1.5em; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; }
.plots > div { flex: 0 1 680px; }
.plots svg { width: 100%; height: auto; border: 1px solid #eee; }
tr.accepted td.verdict { color: #2e8b57; font-weight: 600; }
tr.failed td.verdict { color: #b00; }
</style>
</head>
<body data-version="" data-updates="0">
<h1>npuopt: <span id="campaign">…</span></h1>
<div id="connection">connecting…</div>
<p class="summary"><span id="state"></span><span id="steps"></span><span id="runs"></span><span id="wall"></span><span id="geomean"></span></p>
<table id="kernels"><thead><tr><th>kernel</th><th>status</th><th>champion</th><th>champion cycles</th><th>speedup</th><th>% of speed of light</th><th>designs (accepted)</th></tr></thead><tbody></tbody></table>
<div class="plots" id="plots"></div>
<h2>Latest steps</h2>
<table id="recent"><thead><tr><th>step</th><th>kernel</th><th>role</th><th>move</th><th>verdict</th><th>cycles</th></tr></thead><tbody></tbody></table>
<script src="app.js"></script>
</body>
</html>
)HTML";

constexpr const char* k_script = R"JS('use strict';
const query = new URLSearchParams(window.location.search);
const token = query.get('token');
const waitSecs = query.get('wait') || '20';
let version = '';

function api(path) {
  return path + (token ? (path.includes('?') ? '&' : '?') + 'token=' + encodeURIComponent(token) : '');
}
function text(id, value) { document.getElementById(id).textContent = value; }
function cell(row, value, cls) {
  const td = document.createElement('td');
  td.textContent = value;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}
function cycles(value) { return value === null || value === undefined ? '-' : Math.round(value).toString(); }

function render(state) {
  const status = state.status;
  text('campaign', state.campaign);
  text('state', 'search ' + status.state + (status.stop_reason ? ' (' + status.stop_reason + ')' : ''));
  text('steps', 'steps ' + status.steps);
  text('runs', 'device runs ' + status.device_runs_used + ' of ' + status.device_runs_budget);
  text('wall', 'wall ' + Math.round(status.wall_secs_used) + ' s of ' + Math.round(status.wall_secs_budget) + ' s');
  text('geomean', status.geomean_speedup > 0 ? 'geomean speedup ' + status.geomean_speedup.toFixed(3) + 'x' : '');
  const kernels = document.querySelector('#kernels tbody');
  kernels.replaceChildren();
  const plots = document.getElementById('plots');
  plots.replaceChildren();
  for (const kernel of state.kernels) {
    const row = document.createElement('tr');
    row.id = 'kernel-' + kernel.kernel;
    cell(row, kernel.kernel);
    cell(row, kernel.status + (kernel.reason ? ' (' + kernel.reason + ')' : ''));
    cell(row, kernel.champion || '-', 'champion');
    cell(row, cycles(kernel.champion_cycles), 'num');
    cell(row, kernel.champion_cycles ? kernel.speedup.toFixed(3) + 'x' : '-', 'num');
    cell(row, kernel.percent_of_speed_of_light > 0 ? kernel.percent_of_speed_of_light.toFixed(0) + '%' : '-', 'num');
    cell(row, kernel.designs + ' (' + kernel.accepted + ')', 'num');
    kernels.appendChild(row);
    if (kernel.plot) {
      const figure = document.createElement('div');
      figure.innerHTML = kernel.plot;  // SVG drawn and escaped by the server
      plots.appendChild(figure);
    }
  }
  const recent = document.querySelector('#recent tbody');
  recent.replaceChildren();
  for (const step of state.recent) {
    const row = document.createElement('tr');
    row.className = step.verdict;
    cell(row, step.step, 'num');
    cell(row, step.kernel);
    cell(row, step.role);
    cell(row, step.move);
    cell(row, step.verdict, 'verdict');
    cell(row, cycles(step.cycles), 'num');
    recent.appendChild(row);
  }
  document.body.dataset.version = state.version;
  document.body.dataset.updates = String(Number(document.body.dataset.updates) + 1);
}

async function poll() {
  let delay = 200;
  try {
    const reply = await fetch(api('api/wait?since=' + encodeURIComponent(version) + '&timeout=' + waitSecs),
                              {cache: 'no-store'});
    const body = await reply.json();
    if (!reply.ok) throw new Error(body.message || ('HTTP ' + reply.status));
    if (body.version !== version) render(body);
    version = body.version;
    const connection = document.getElementById('connection');
    connection.className = '';
    connection.textContent = 'live: updated ' + new Date().toLocaleTimeString();
  } catch (error) {
    const connection = document.getElementById('connection');
    connection.className = 'error';
    connection.textContent = 'not connected (' + error.message + '); retrying';
    delay = 2000;
  }
  setTimeout(poll, delay);
}
poll();
)JS";

void set_json(httplib::Response& response, const nlohmann::json& body, int status = 200) {
    response.status = status;
    response.set_content(body.dump(), "application/json; charset=utf-8");
}

void set_error(httplib::Response& response, int status, const std::string& kind, const std::string& message) {
    set_json(response, {{"kind", kind}, {"message", message}, {"status", status}}, status);
}

}  // namespace

std::string dashboard_version(store::CampaignStore& store) {
    store::TreeStore trees(store.database());
    return trees.state("counters").value_or("{}") + "|" + trees.state("run").value_or("{}");
}

nlohmann::json dashboard_state(store::CampaignStore& store, std::size_t recent_steps) {
    const std::string version = dashboard_version(store);
    const campaign::CampaignStatus status = campaign::campaign_status(store);
    const CampaignSeries series = load_campaign_series(store);
    nlohmann::json kernels = nlohmann::json::array();
    for (const auto& kernel : status.kernels) {
        const KernelSeries* kernel_series = nullptr;
        for (const auto& candidate : series.kernels) {
            if (candidate.kernel == kernel.kernel) kernel_series = &candidate;
        }
        kernels.push_back(kernel_json(kernel, kernel_series, TimeUnit{}));
    }
    return {{"version", version},
            {"status", campaign::to_json(status)},
            {"kernels", std::move(kernels)},
            {"recent", recent_json(store, status.kernels, recent_steps)}};
}

bool is_loopback_address(const std::string& address) {
    if (address == "localhost") return true;
    in_addr v4{};
    if (inet_pton(AF_INET, address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
    in6_addr v6{};
    if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
    return false;
}

std::string random_token() {
    std::ifstream random("/dev/urandom", std::ios::binary);
    unsigned char bytes[16] = {};
    random.read(reinterpret_cast<char*>(bytes), sizeof bytes);
    if (!random) throw Error(ErrorKind::io, "/dev/urandom: cannot read a token");
    std::string token;
    for (unsigned char byte : bytes) token += fmt::format("{:02x}", byte);
    return token;
}

struct DashboardServer::Impl {
    DashboardOptions options;
    fs::path db_file;
    httplib::Server server;
    int port = 0;
    std::atomic<bool> stopping{false};
    mutable std::mutex counts_mutex;
    std::map<std::string, std::int64_t> request_counts;

    store::CampaignStore open_store() const {
        store::Database::Options open_options;
        open_options.create = false;
        open_options.read_only = true;  // the dashboard never writes: it runs beside `npuopt run`
        return store::CampaignStore::open(db_file, open_options);
    }

    /// Whether the request may be answered; sets the error response when not.
    bool admit(const httplib::Request& request, httplib::Response& response) const {
        if (is_loopback_address(options.bind_address)) {
            // A page on another site cannot reach us through a name that resolves to 127.0.0.1.
            const std::string host = host_name(request.get_header_value("Host"));
            if (!host.empty() && !is_loopback_address(host)) {
                set_error(response, 403, "forbidden", fmt::format("Host '{}' is not a loopback address", host));
                return false;
            }
        }
        if (options.token.empty()) return true;
        std::string given = request.get_param_value("token");
        const std::string authorization = request.get_header_value("Authorization");
        if (given.empty() && authorization.rfind("Bearer ", 0) == 0) given = authorization.substr(7);
        if (given.empty()) given = cookie_value(request.get_header_value("Cookie"), k_token_cookie);
        if (!same_secret(given, options.token)) {
            set_error(response, 401, "unauthorized",
                      "this dashboard needs its token: open the URL `npuopt serve` printed (…/?token=…)");
            return false;
        }
        return true;
    }

    void state_reply(httplib::Response& response, bool wait, const httplib::Request& request) {
        try {
            if (wait) {
                const std::string since = request.get_param_value("since");
                double timeout = options.max_wait_secs;
                if (request.has_param("timeout")) {
                    try {
                        timeout = std::clamp(std::stod(request.get_param_value("timeout")), 0.0, options.max_wait_secs);
                    } catch (const std::exception&) {
                        set_error(response, 400, "invalid_input", "timeout must be a number of seconds");
                        return;
                    }
                }
                const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
                while (!stopping && std::chrono::steady_clock::now() < deadline) {
                    auto store = open_store();
                    if (dashboard_version(store) != since) break;
                    std::this_thread::sleep_for(std::chrono::duration<double>(options.poll_secs));
                }
            }
            auto store = open_store();
            nlohmann::json state = dashboard_state(store);
            state["campaign"] = options.campaign_dir.filename().string().empty()
                                    ? options.campaign_dir.string()
                                    : options.campaign_dir.filename().string();
            state["dir"] = options.campaign_dir.string();
            set_json(response, state);
        } catch (const Error& error) {
            set_error(response, 500, std::string(error_kind_name(error.kind())), error.what());
        } catch (const std::exception& error) {
            set_error(response, 500, "internal", error.what());
        }
    }

    void routes() {
        server.set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
            {
                std::lock_guard<std::mutex> lock(counts_mutex);
                request_counts[request.path] += 1;
            }
            response.set_header("Cache-Control", "no-store");
            response.set_header("X-Content-Type-Options", "nosniff");
            response.set_header("Content-Security-Policy",
                                "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:");
            if (!admit(request, response)) return httplib::Server::HandlerResponse::Handled;
            if (!options.token.empty() && request.has_param("token")) {
                response.set_header("Set-Cookie", fmt::format("{}={}; HttpOnly; SameSite=Strict; Path=/",
                                                              k_token_cookie, options.token));
            }
            return httplib::Server::HandlerResponse::Unhandled;
        });
        server.Get("/", [](const httplib::Request&, httplib::Response& response) {
            response.set_content(k_page, "text/html; charset=utf-8");
        });
        server.Get("/app.js", [](const httplib::Request&, httplib::Response& response) {
            response.set_content(k_script, "text/javascript; charset=utf-8");
        });
        server.Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
            response.set_content("ok\n", "text/plain");
        });
        server.Get("/api/state", [this](const httplib::Request& request, httplib::Response& response) {
            state_reply(response, false, request);
        });
        server.Get("/api/wait", [this](const httplib::Request& request, httplib::Response& response) {
            state_reply(response, true, request);
        });
        server.set_error_handler([](const httplib::Request& request, httplib::Response& response) {
            if (response.body.empty()) {
                set_error(response, response.status, "not_found",
                          fmt::format("{}: no such page (try / or /api/state)", request.path));
            }
        });
    }
};

DashboardServer::DashboardServer(DashboardOptions options) : m_impl(std::make_unique<Impl>()) {
    m_impl->options = std::move(options);
    m_impl->db_file = m_impl->options.campaign_dir / k_campaign_db;
}

DashboardServer::~DashboardServer() { stop(); }

int DashboardServer::bind() {
    auto& options = m_impl->options;
    if (!fs::is_regular_file(m_impl->db_file)) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("{} is not a campaign directory (no {}; create one with `npuopt init`)",
                                options.campaign_dir.string(), k_campaign_db));
    }
    m_impl->open_store();  // a damaged or foreign database is an error now, not on the first page load
    if (!is_loopback_address(options.bind_address)) {
        if (!options.allow_remote) {
            throw Error(ErrorKind::invalid_input,
                        fmt::format("--bind {} is not a loopback address: add --allow-remote to serve beyond this "
                                    "machine (every request then needs the token that serve prints)",
                                    options.bind_address));
        }
        if (options.token.empty()) options.token = random_token();
    }
    if (options.port < 0 || options.port > 65535) {
        throw Error(ErrorKind::invalid_input, fmt::format("--port {}: not a port (0 to 65535)", options.port));
    }
    m_impl->routes();
    m_impl->server.set_keep_alive_max_count(100);
    // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second dashboard on the
    // same port would bind without an error and take half of the first one's requests.
    m_impl->server.set_socket_options([](int sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    if (options.port == 0) {
        m_impl->port = m_impl->server.bind_to_any_port(options.bind_address);
        if (m_impl->port < 0) m_impl->port = 0;
    } else if (m_impl->server.bind_to_port(options.bind_address, options.port)) {
        m_impl->port = options.port;
    }
    if (m_impl->port <= 0) {
        throw Error(ErrorKind::io, fmt::format("cannot listen on {}:{} (in use? try --port 0 for any free port)",
                                               options.bind_address, options.port));
    }
    return m_impl->port;
}

bool DashboardServer::serve() { return m_impl->server.listen_after_bind(); }

void DashboardServer::stop() {
    m_impl->stopping = true;
    if (m_impl->server.is_running()) m_impl->server.stop();
}

std::string DashboardServer::url(bool with_token) const {
    const std::string& address = m_impl->options.bind_address;
    const std::string host = address.find(':') != std::string::npos ? "[" + address + "]" : address;
    std::string out = fmt::format("http://{}:{}/", host, m_impl->port);
    if (with_token && !m_impl->options.token.empty()) out += "?token=" + m_impl->options.token;
    return out;
}

std::int64_t DashboardServer::requests(const std::string& path) const {
    std::lock_guard<std::mutex> lock(m_impl->counts_mutex);
    std::int64_t count = 0;
    for (const auto& [request_path, path_count] : m_impl->request_counts) {
        if (path.empty() || request_path == path) count += path_count;
    }
    return count;
}

}  // namespace npuopt::report

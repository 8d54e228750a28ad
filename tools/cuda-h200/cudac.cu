// cudac — the cuda-h200 target's toolchain: nvcc plus a runner, speaking npuopt-jsonl/1
// (docs/toolchain-protocol.md). One program, so that the runner's buffers, inputs, reference
// and timing live in the toolchain, not in the design:
//
//   cudac --version                     version line (cudac + nvcc + header)
//   cudac paths                         what the sandbox must expose (CUDA root, cudac's root)
//   cudac compile FILE --cache-dir D    nvcc -Xptxas -v → D/<key>.so (+ .sha256, .diag); no design code runs
//   cudac check FILE                    the compile's diagnostics and resource report
//   cudac schedule FILE ...             unsupported (exit 2): npuopt ranks designs with its cost model
//   cudac run FILE --kernel K --seed S --repeat N --shape k=v,... [--check] [--graph] [--no-flush]
//             [--launch-mode queued|idle]
//   cudac device                        the GPU's name and properties; exit 77 when there is none
//
// Run: the design's shared object is loaded, every tensor allocated and generated on the device
// from the seed (weights once, inputs fresh for every repeat), outputs poisoned (0xFF: bf16 NaN)
// and L2 flushed before each timed launch (a write of 4x its size, then a read of 2x its size, so
// that L2 holds clean lines: dirty ones would be written back during the timed kernel). By default (--launch-mode
// queued) the start event and the launch are enqueued behind the flush, so the events time the
// device's work from the first kernel's start to the last one's end, without the host's submission
// latency of the first launch (later launches of a chain are submitted while the flush runs);
// --launch-mode idle waits for the flush first, so the host's launch latency is timed too. `cycles`
// in run lines are NANOSECONDS (cudaEventElapsedTime). --check compares the last repeat's
// outputs with a float32 CPU reference: ‖out − ref‖ / ‖ref‖ per tensor.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "npuopt_cuda.h"

#ifndef CUDAC_VERSION
#define CUDAC_VERSION "0.1.0"
#endif

namespace {

// ---- small utilities ------------------------------------------------------------------------

std::string json_escape(const std::string& text) {
    std::string out;
    for (unsigned char c : text) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            default:
                if (c < 0x20) {
                    char buffer[8];
                    std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
                    out += buffer;
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    return out;
}

std::string quoted(const std::string& text) { return "\"" + json_escape(text) + "\""; }

void emit(const std::string& line) {
    std::fputs(line.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
}

[[noreturn]] void fail(const std::string& kind, const std::string& message, int status, const std::string& extra = "") {
    emit("{\"type\":\"error\",\"kind\":" + quoted(kind) + ",\"message\":" + quoted(message) + extra + "}");
    std::exit(status);
}

std::string read_file(const std::string& path, bool* ok = nullptr) {
    std::ifstream stream(path, std::ios::binary);
    if (ok) *ok = static_cast<bool>(stream);
    std::ostringstream buffer;
    buffer << stream.rdbuf();
    return buffer.str();
}

bool write_file(const std::string& path, const std::string& text) {
    std::ofstream stream(path, std::ios::binary | std::ios::trunc);
    stream << text;
    return static_cast<bool>(stream);
}

bool file_exists(const std::string& path) {
    struct stat info {};
    return ::stat(path.c_str(), &info) == 0;
}

std::string dirname_of(const std::string& path) {
    auto slash = path.find_last_of('/');
    return slash == std::string::npos ? std::string(".") : (slash == 0 ? std::string("/") : path.substr(0, slash));
}

std::string self_exe() {
    char buffer[4096];
    ssize_t length = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
    if (length <= 0) return "cudac";
    buffer[length] = 0;
    return buffer;
}

// SHA-256 (FIPS 180-4), for the content-addressed compile cache.
std::string sha256_hex(const std::string& data) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::string message = data;
    const uint64_t bit_length = static_cast<uint64_t>(data.size()) * 8;
    message.push_back(static_cast<char>(0x80));
    while (message.size() % 64 != 56) message.push_back(0);
    for (int shift = 56; shift >= 0; shift -= 8) message.push_back(static_cast<char>((bit_length >> shift) & 0xff));
    auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
    for (size_t block = 0; block < message.size(); block += 64) {
        uint32_t w[64];
        for (int i = 0; i < 16; ++i) {
            const auto* p = reinterpret_cast<const unsigned char*>(message.data() + block + 4 * i);
            w[i] = (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
        }
        for (int i = 16; i < 64; ++i) {
            uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
        for (int i = 0; i < 64; ++i) {
            uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
            uint32_t ch = (e & f) ^ (~e & g);
            uint32_t t1 = hh + s1 + ch + k[i] + w[i];
            uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
            uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
            uint32_t t2 = s0 + maj;
            hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
        }
        h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
    }
    char out[65];
    for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h[i]);
    return std::string(out, 64);
}

/// Runs argv, returns (exit status, stdout+stderr).
std::pair<int, std::string> run_capture(const std::vector<std::string>& argv) {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) return {127, "pipe failed"};
    pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(pipe_fds[1], 1);
        ::dup2(pipe_fds[1], 2);
        ::close(pipe_fds[0]);
        ::close(pipe_fds[1]);
        std::vector<char*> args;
        for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
        args.push_back(nullptr);
        ::execvp(args[0], args.data());
        std::fprintf(stderr, "cannot execute %s: %s\n", argv[0].c_str(), std::strerror(errno));
        ::_exit(127);
    }
    ::close(pipe_fds[1]);
    std::string output;
    char buffer[65536];
    ssize_t count;
    while ((count = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0) output.append(buffer, static_cast<size_t>(count));
    ::close(pipe_fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output};
}

// ---- the compiler side ---------------------------------------------------------------------

std::string cudac_root() { return dirname_of(dirname_of(self_exe())); }  // <root>/bin/cudac

std::string include_dir() {
    if (const char* env = std::getenv("CUDAC_INCLUDE")) return env;
    return cudac_root() + "/include";
}

std::string find_nvcc() {
    if (const char* env = std::getenv("CUDAC_NVCC")) return env;
#ifdef CUDAC_NVCC_PATH
    if (file_exists(CUDAC_NVCC_PATH)) return CUDAC_NVCC_PATH;
#endif
    for (const char* candidate : {"/usr/local/cuda/bin/nvcc", "/usr/bin/nvcc"}) {
        if (file_exists(candidate)) return candidate;
    }
    return "nvcc";
}

std::string cuda_root() {
    char resolved[4096];
    std::string nvcc = find_nvcc();
    if (::realpath(nvcc.c_str(), resolved)) return dirname_of(dirname_of(resolved));
    return "/usr/local/cuda";
}

std::string nvcc_version() {
    static std::string cached;
    if (!cached.empty()) return cached;
    auto [status, output] = run_capture({find_nvcc(), "--version"});
    std::smatch match;
    static const std::regex release(R"(release ([0-9.]+), V([0-9.]+))");
    if (status == 0 && std::regex_search(output, match, release)) cached = match[2].str();
    else cached = "unknown";
    return cached;
}

std::vector<std::string> nvcc_flags() {
    return {"-O3", "-std=c++17", "-gencode=arch=compute_90,code=sm_90", "-shared", "-Xcompiler", "-fPIC",
            "-Xptxas", "-v", "-lineinfo"};
}

std::string header_text() {
    bool ok = false;
    std::string text = read_file(include_dir() + "/npuopt_cuda.h", &ok);
    if (!ok || text.empty()) fail("usage", "npuopt_cuda.h not found in " + include_dir() + " (set CUDAC_INCLUDE)", 2);
    return text;
}

std::string toolchain_version() {
    return std::string(CUDAC_VERSION) + "+nvcc" + nvcc_version() + ".h" + sha256_hex(header_text()).substr(0, 8);
}

std::string cache_key(const std::string& source) {
    std::string text = source + '\0' + toolchain_version() + '\0';
    for (const auto& flag : nvcc_flags()) text += flag + ' ';
    return sha256_hex(text);
}

struct Diagnostic {
    std::string level, code, message, file;
    int line = 0;
    std::vector<std::string> notes;
    std::vector<std::tuple<std::string, double, double>> quantities;  // name, value, limit (<0: none)
};

std::string diagnostic_json(const Diagnostic& d) {
    std::string out = "{\"type\":\"diagnostic\",\"level\":" + quoted(d.level) + ",\"code\":" + quoted(d.code) +
                      ",\"message\":" + quoted(d.message) + ",\"span\":";
    out += d.file.empty() || d.line <= 0 ? std::string("null")
                          : "{\"file\":" + quoted(d.file) + ",\"line\":" + std::to_string(d.line) + ",\"column\":1}";
    out += ",\"quantities\":[";
    for (size_t i = 0; i < d.quantities.size(); ++i) {
        const auto& [name, value, limit] = d.quantities[i];
        char buffer[256];
        if (limit >= 0) std::snprintf(buffer, sizeof buffer, "{\"quantity\":\"%s\",\"value\":%.0f,\"limit\":%.0f}", name.c_str(), value, limit);
        else std::snprintf(buffer, sizeof buffer, "{\"quantity\":\"%s\",\"value\":%.0f}", name.c_str(), value);
        out += (i ? "," : "") + std::string(buffer);
    }
    out += "],\"notes\":[";
    for (size_t i = 0; i < d.notes.size() && i < 8; ++i) out += (i ? "," : "") + quoted(d.notes[i]);
    return out + "]}";
}

struct CompileOutcome {
    bool ok = false;
    int errors = 0, warnings = 0;
    double secs = 0;
    std::vector<std::string> lines;  // diagnostic and resources JSON lines
};

/// nvcc's output → diagnostics (front end, host compiler, ptxas, linker) and one resources
/// line per entry function (registers, shared memory, stack, spills).
CompileOutcome parse_nvcc(const std::string& output, int status, const std::string& file_name) {
    CompileOutcome outcome;
    static const std::regex front(R"(^(.*)\((\d+)\): (error|warning)( #\S+)?: (.*)$)");
    static const std::regex host(R"(^(.*):(\d+):(\d+): (error|warning|fatal error): (.*)$)");
    static const std::regex ptx_entry(R"(Compiling entry function '([^']+)')");
    static const std::regex ptx_used(R"(Used (\d+) registers(.*))");
    static const std::regex ptx_smem(R"((\d+) bytes smem)");
    static const std::regex ptx_frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
    static const std::regex ptx_too_much(R"(uses too much shared data \((0x[0-9a-f]+) bytes, (0x[0-9a-f]+) max\))");
    static const std::regex ptx_error(R"(^ptxas (fatal|error)\s*: (.*)$)");
    std::istringstream stream(output);
    std::string line, entry;
    long registers = -1, smem = 0, stack = 0, spill_st = 0, spill_ld = 0;
    std::vector<std::string> other;
    auto flush_entry = [&] {
        if (entry.empty() || registers < 0) return;
        char buffer[1024];
        std::snprintf(buffer, sizeof buffer,
                      "{\"type\":\"resources\",\"function\":%s,\"registers\":%ld,\"smem_bytes\":%ld,"
                      "\"stack_bytes\":%ld,\"spill_store_bytes\":%ld,\"spill_load_bytes\":%ld}",
                      quoted(entry).c_str(), registers, smem, stack, spill_st, spill_ld);
        outcome.lines.push_back(buffer);
        if (spill_st + spill_ld > 0) {
            Diagnostic d{"warning", "W0301", "registers spill to local memory in " + entry, file_name};
            d.quantities.push_back({"spill_bytes", double(spill_st + spill_ld), 0});
            d.quantities.push_back({"registers", double(registers), 255});
            d.notes.push_back("help: fewer rows or loads in flight per thread, or a larger register cap");
            outcome.lines.push_back(diagnostic_json(d));
            ++outcome.warnings;
        }
        registers = -1; smem = stack = spill_st = spill_ld = 0;
    };
    while (std::getline(stream, line)) {
        std::smatch m;
        if (std::regex_search(line, m, ptx_entry)) {
            flush_entry();
            entry = m[1].str();
            continue;
        }
        if (std::regex_search(line, m, ptx_frame)) {
            stack = std::stol(m[1].str()); spill_st = std::stol(m[2].str()); spill_ld = std::stol(m[3].str());
            continue;
        }
        if (std::regex_search(line, m, ptx_used)) {
            registers = std::stol(m[1].str());
            std::smatch s;
            std::string rest = m[2].str();
            if (std::regex_search(rest, s, ptx_smem)) smem = std::stol(s[1].str());
            flush_entry();
            continue;
        }
        if (line.rfind("ptxas info", 0) == 0 || line.find("bytes gmem") != std::string::npos) continue;
        if (std::regex_search(line, m, ptx_too_much)) {
            Diagnostic d{"error", "E0201", "static shared memory exceeds the per-block limit", file_name};
            d.quantities.push_back({"smem_bytes", double(std::stol(m[1].str(), nullptr, 16)), double(std::stol(m[2].str(), nullptr, 16))});
            d.notes.push_back(line);
            d.notes.push_back("help: use dynamic shared memory (cudaFuncSetAttribute) or a smaller tile");
            outcome.lines.push_back(diagnostic_json(d));
            ++outcome.errors;
            continue;
        }
        if (std::regex_match(line, m, ptx_error)) {
            Diagnostic d{"error", "E0200", m[2].str(), file_name};
            outcome.lines.push_back(diagnostic_json(d));
            ++outcome.errors;
            continue;
        }
        if (std::regex_match(line, m, front)) {
            const bool error = m[3].str() == "error";
            Diagnostic d{error ? "error" : "warning", error ? "E0001" : "W0001", m[5].str(), file_name,
                         std::stoi(m[2].str())};
            outcome.lines.push_back(diagnostic_json(d));
            ++(error ? outcome.errors : outcome.warnings);
            continue;
        }
        if (std::regex_match(line, m, host)) {
            const bool error = m[4].str() != "warning";
            Diagnostic d{error ? "error" : "warning", error ? "E0002" : "W0002", m[5].str(), file_name,
                         std::stoi(m[2].str())};
            outcome.lines.push_back(diagnostic_json(d));
            ++(error ? outcome.errors : outcome.warnings);
            continue;
        }
        if (!line.empty()) other.push_back(line);
    }
    flush_entry();
    if (status != 0 && outcome.errors == 0) {
        Diagnostic d{"error", "E0003", "nvcc failed (status " + std::to_string(status) + ")", file_name};
        for (size_t i = 0; i < other.size() && d.notes.size() < 8; ++i) d.notes.push_back(other[i].substr(0, 300));
        outcome.lines.push_back(diagnostic_json(d));
        ++outcome.errors;
    }
    outcome.ok = status == 0 && outcome.errors == 0;
    return outcome;
}

std::string base_name(const std::string& path) {
    auto slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// Compiles `file` into dir/<key>.so; writes the .sha256 sidecar and the .diag (the JSON lines).
CompileOutcome compile_into(const std::string& file, const std::string& dir, const std::string& key) {
    const std::string so = dir + "/" + key + ".so";
    const std::string tmp = so + ".tmp." + std::to_string(::getpid());
    // nvcc reads a copy named .cu (the design may be any extension), in a scratch directory.
    const char* tmpdir_env = std::getenv("TMPDIR");
    std::string scratch = std::string(tmpdir_env && *tmpdir_env ? tmpdir_env : "/tmp") + "/cudac." + std::to_string(::getpid());
    ::mkdir(scratch.c_str(), 0700);
    const std::string source = scratch + "/" + key.substr(0, 16) + ".cu";
    bool ok = false;
    std::string text = read_file(file, &ok);
    CompileOutcome outcome;
    if (!ok) {
        Diagnostic d{"error", "E0004", "cannot read " + file, ""};
        outcome.lines.push_back(diagnostic_json(d));
        outcome.errors = 1;
        return outcome;
    }
    write_file(source, "#line 1 \"" + base_name(file) + "\"\n" + text);
    std::vector<std::string> argv = {find_nvcc()};
    for (const auto& flag : nvcc_flags()) argv.push_back(flag);
    argv.insert(argv.end(), {"-I", include_dir(), "-Xlinker", "-rpath," + cuda_root() + "/lib64", "-o", tmp, source,
                             "-lcublas", "--compiler-options", "-fno-gnu-unique"});
    const auto start = std::chrono::steady_clock::now();
    auto [status, output] = run_capture(argv);
    outcome = parse_nvcc(output, status, base_name(file));
    outcome.secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ::unlink(source.c_str());
    ::rmdir(scratch.c_str());
    std::string diag;
    for (const auto& line : outcome.lines) diag += line + "\n";
    char summary[256];
    std::snprintf(summary, sizeof summary, "{\"ok\":%s,\"errors\":%d,\"warnings\":%d,\"compile_secs\":%.3f}",
                  outcome.ok ? "true" : "false", outcome.errors, outcome.warnings, outcome.secs);
    diag += summary;
    diag += "\n";
    if (outcome.ok) {
        std::string binary = read_file(tmp);
        write_file(so + ".sha256", sha256_hex(binary) + "\n");
        ::rename(tmp.c_str(), so.c_str());
    } else {
        ::unlink(tmp.c_str());
    }
    write_file(so + ".diag", diag);
    return outcome;
}

/// Reads a .diag file back into an outcome.
bool load_diag(const std::string& path, CompileOutcome& outcome) {
    bool ok = false;
    std::string text = read_file(path, &ok);
    if (!ok || text.empty()) return false;
    std::istringstream stream(text);
    std::string line, last;
    while (std::getline(stream, line)) {
        if (line.empty()) continue;
        if (!last.empty()) outcome.lines.push_back(last);
        last = line;
    }
    std::smatch m;
    static const std::regex summary(R"(\"ok\":(true|false),\"errors\":(\d+),\"warnings\":(\d+),\"compile_secs\":([0-9.]+))");
    if (!std::regex_search(last, m, summary)) return false;
    outcome.ok = m[1].str() == "true";
    outcome.errors = std::stoi(m[2].str());
    outcome.warnings = std::stoi(m[3].str());
    outcome.secs = std::stod(m[4].str());
    return true;
}

std::string scratch_dir() {
    const char* env = std::getenv("TMPDIR");
    return env && *env ? env : "/tmp";
}

std::string default_cache_dir() {
    const char* env = std::getenv("CUDAC_CACHE_DIR");
    return env && *env ? env : "";
}

/// The compiled shared object for `file`: the cache's entry (hash checked) or a private compile.
/// Prints the diagnostics and fails (kind compile) when it does not compile.
std::string artifact_for(const std::string& file, const std::string& cache_dir, CompileOutcome* diag_out) {
    bool ok = false;
    std::string source = read_file(file, &ok);
    if (!ok) fail("usage", "cannot read " + file, 2);
    const std::string key = cache_key(source);
    if (!cache_dir.empty()) {
        const std::string so = cache_dir + "/" + key + ".so";
        if (file_exists(so)) {
            std::string want = read_file(so + ".sha256");
            want.erase(std::remove(want.begin(), want.end(), '\n'), want.end());
            if (sha256_hex(read_file(so)) != want) {
                fail("cache", "sha256 mismatch", 1, ",\"entry\":" + quoted(so));
            }
            if (diag_out) load_diag(so + ".diag", *diag_out);
            return so;
        }
        if (file_exists(so + ".diag")) {  // a compile that failed: its diagnostics are the answer
            CompileOutcome outcome;
            if (load_diag(so + ".diag", outcome) && !outcome.ok) {
                if (diag_out) { *diag_out = outcome; return ""; }
                for (const auto& line : outcome.lines) emit(line);
                fail("compile", "the design does not compile", 1);
            }
        }
    }
    CompileOutcome outcome = compile_into(file, scratch_dir(), key);
    if (diag_out) *diag_out = outcome;
    if (!outcome.ok) {
        if (diag_out) return "";
        for (const auto& line : outcome.lines) emit(line);
        fail("compile", "the design does not compile", 1);
    }
    return scratch_dir() + "/" + key + ".so";
}

// ---- the device side: tensors, generation, reference ------------------------------------------

#define CUDA_OK(expr)                                                                              \
    do {                                                                                           \
        cudaError_t status_ = (expr);                                                              \
        if (status_ != cudaSuccess) fail("device", std::string(#expr) + ": " + cudaGetErrorString(status_), 1); \
    } while (0)

__device__ __forceinline__ uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

__global__ void generate_kernel(void* dst, int64_t n, int dtype, uint64_t seed, float lo, float hi) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float u = float(splitmix(seed ^ (uint64_t(i) * 0xd1b54a32d192ed03ULL)) >> 40) * (1.0f / 16777216.0f);
        const float v = lo + (hi - lo) * u;
        if (dtype == NPUOPT_BF16) static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16(v);
        else if (dtype == NPUOPT_F32) static_cast<float*>(dst)[i] = v;
        else static_cast<int32_t*>(dst)[i] = int32_t(floorf(v));
    }
}

/// Reads n 16-byte words: after the flush's writes this leaves L2 holding clean lines, so the timed
/// kernel does not pay for writing back the flush's dirty lines.
__global__ void clean_read_kernel(const uint4* p, int64_t n, unsigned* sink) {
    unsigned acc = 0;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const uint4 v = __ldcg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;
}

uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t x = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL + (a << 6) + (a >> 2));
    x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ULL;
    return x ^ (x >> 29);
}

int dtype_bytes(int dtype) { return dtype == NPUOPT_BF16 ? 2 : 4; }

struct TensorDef {
    std::string name;
    std::string role;  // input | weight | output
    int dtype = NPUOPT_BF16;
    int64_t elements = 0;
    float lo = -1, hi = 1;  // generation range
};

using Shape = std::map<std::string, int64_t>;
using HostTensors = std::map<std::string, std::vector<float>>;  // every tensor as float (i32 too)
using Reference = std::function<HostTensors(const HostTensors&, const Shape&)>;

struct KernelDef {
    std::vector<TensorDef> tensors;
    Reference reference;  // outputs by name
    double tolerance = 2e-2;
};

int64_t need(const Shape& shape, const char* name) {
    auto found = shape.find(name);
    if (found == shape.end() || found->second <= 0) fail("usage", std::string("shape variable '") + name + "' missing or not positive", 2);
    return found->second;
}

constexpr float k_eps = 1e-6f;
constexpr double k_theta = 10000.0;

/// y[b][n] = sum_k w[n][k] x[b][k], over threads.
void gemv_ref(const std::vector<float>& w, int64_t n_rows, int64_t k_cols, const std::vector<float>& x, int64_t batch,
              std::vector<float>& y) {
    y.assign(batch * n_rows, 0.0f);
    unsigned threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            for (int64_t n = t; n < n_rows; n += threads) {
                const float* row = w.data() + n * k_cols;
                for (int64_t b = 0; b < batch; ++b) {
                    const float* xb = x.data() + b * k_cols;
                    double acc = 0;
                    for (int64_t k = 0; k < k_cols; ++k) acc += double(row[k]) * xb[k];
                    y[b * n_rows + n] = float(acc);
                }
            }
        });
    }
    for (auto& thread : pool) thread.join();
}

std::vector<float> rmsnorm_ref(const std::vector<float>& x, int64_t batch, int64_t n, const std::vector<float>& w) {
    std::vector<float> out(x.size());
    for (int64_t b = 0; b < batch; ++b) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += double(x[b * n + i]) * x[b * n + i];
        const double scale = 1.0 / std::sqrt(ss / n + k_eps);
        for (int64_t i = 0; i < n; ++i) out[b * n + i] = float(x[b * n + i] * scale * w[i]);
    }
    return out;
}

double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

std::map<std::string, KernelDef> kernel_defs(const std::string& kernel, const Shape& shape) {
    std::map<std::string, KernelDef> defs;
    if (kernel == "project_qkv") {
        const int64_t B = need(shape, "batch"), H = need(shape, "hidden"), QH = need(shape, "q_heads"),
                      KH = need(shape, "kv_heads"), D = need(shape, "head_dim");
        const float ws = std::sqrt(3.0f / H);
        KernelDef def;
        def.tensors = {{"x", "input", NPUOPT_BF16, B * H, -2, 2},
                       {"pos", "input", NPUOPT_I32, B, 0, 4096},
                       {"attn_norm", "weight", NPUOPT_BF16, H, 0.5f, 1.5f},
                       {"wq", "weight", NPUOPT_BF16, QH * D * H, -ws, ws},
                       {"wk", "weight", NPUOPT_BF16, KH * D * H, -ws, ws},
                       {"wv", "weight", NPUOPT_BF16, KH * D * H, -ws, ws},
                       {"q_norm", "weight", NPUOPT_BF16, D, 0.5f, 1.5f},
                       {"k_norm", "weight", NPUOPT_BF16, D, 0.5f, 1.5f},
                       {"q", "output", NPUOPT_BF16, B * QH * D},
                       {"k", "output", NPUOPT_BF16, B * KH * D},
                       {"v", "output", NPUOPT_BF16, B * KH * D}};
        def.reference = [=](const HostTensors& t, const Shape&) {
            auto xn = rmsnorm_ref(t.at("x"), B, H, t.at("attn_norm"));
            HostTensors out;
            std::vector<float> q, k, v;
            gemv_ref(t.at("wq"), QH * D, H, xn, B, q);
            gemv_ref(t.at("wk"), KH * D, H, xn, B, k);
            gemv_ref(t.at("wv"), KH * D, H, xn, B, v);
            auto head_norm_rope = [&](std::vector<float>& y, int64_t heads, const std::vector<float>& w) {
                for (int64_t b = 0; b < B; ++b) {
                    const double pos = t.at("pos")[b];
                    for (int64_t h = 0; h < heads; ++h) {
                        float* p = y.data() + (b * heads + h) * D;
                        double ss = 0;
                        for (int64_t i = 0; i < D; ++i) ss += double(p[i]) * p[i];
                        const double scale = 1.0 / std::sqrt(ss / D + k_eps);
                        std::vector<double> n(D);
                        for (int64_t i = 0; i < D; ++i) n[i] = p[i] * scale * w[i];
                        for (int64_t i = 0; i < D / 2; ++i) {
                            const double angle = pos * std::pow(k_theta, -2.0 * double(i) / double(D));
                            const double c = std::cos(angle), s = std::sin(angle);
                            p[i] = float(n[i] * c - n[i + D / 2] * s);
                            p[i + D / 2] = float(n[i] * s + n[i + D / 2] * c);
                        }
                    }
                }
            };
            head_norm_rope(q, QH, t.at("q_norm"));
            head_norm_rope(k, KH, t.at("k_norm"));
            out["q"] = q; out["k"] = k; out["v"] = v;
            return out;
        };
        defs[kernel] = def;
    } else if (kernel == "attention_output") {
        const int64_t B = need(shape, "batch"), H = need(shape, "hidden"), K = need(shape, "q_heads") * need(shape, "head_dim");
        const float ws = std::sqrt(3.0f / K);
        KernelDef def;
        def.tensors = {{"attn", "input", NPUOPT_BF16, B * K, -1, 1},
                       {"residual", "input", NPUOPT_BF16, B * H, -2, 2},
                       {"wo", "weight", NPUOPT_BF16, H * K, -ws, ws},
                       {"post_norm", "weight", NPUOPT_BF16, H, 0.5f, 1.5f},
                       {"out", "output", NPUOPT_BF16, B * H}};
        def.reference = [=](const HostTensors& t, const Shape&) {
            std::vector<float> y;
            gemv_ref(t.at("wo"), H, K, t.at("attn"), B, y);
            auto n = rmsnorm_ref(y, B, H, t.at("post_norm"));
            for (int64_t i = 0; i < B * H; ++i) n[i] += t.at("residual")[i];
            return HostTensors{{"out", n}};
        };
        defs[kernel] = def;
    } else if (kernel == "feedforward") {
        const int64_t B = need(shape, "batch"), H = need(shape, "hidden"), F = need(shape, "ffn");
        const float ws = std::sqrt(3.0f / H), wd = std::sqrt(3.0f / F);
        KernelDef def;
        def.tensors = {{"x", "input", NPUOPT_BF16, B * H, -2, 2},
                       {"ffn_norm", "weight", NPUOPT_BF16, H, 0.5f, 1.5f},
                       {"w_gate", "weight", NPUOPT_BF16, F * H, -ws, ws},
                       {"w_up", "weight", NPUOPT_BF16, F * H, -ws, ws},
                       {"w_down", "weight", NPUOPT_BF16, H * F, -wd, wd},
                       {"post_norm", "weight", NPUOPT_BF16, H, 0.5f, 1.5f},
                       {"out", "output", NPUOPT_BF16, B * H}};
        def.reference = [=](const HostTensors& t, const Shape&) {
            auto xn = rmsnorm_ref(t.at("x"), B, H, t.at("ffn_norm"));
            std::vector<float> g, u, y;
            gemv_ref(t.at("w_gate"), F, H, xn, B, g);
            gemv_ref(t.at("w_up"), F, H, xn, B, u);
            std::vector<float> h(B * F);
            for (int64_t i = 0; i < B * F; ++i) h[i] = float(gelu_tanh(g[i]) * u[i]);
            gemv_ref(t.at("w_down"), H, F, h, B, y);
            auto n = rmsnorm_ref(y, B, H, t.at("post_norm"));
            for (int64_t i = 0; i < B * H; ++i) n[i] += t.at("x")[i];
            return HostTensors{{"out", n}};
        };
        defs[kernel] = def;
    } else if (kernel == "probe") {
        defs[kernel] = KernelDef{};  // microbenchmarks: workspace only, nothing to check
    } else {
        fail("usage", "unknown kernel '" + kernel + "' (project_qkv, attention_output, feedforward, probe)", 2);
    }
    return defs;
}

std::vector<float> to_host_floats(const void* device, int64_t elements, int dtype) {
    std::vector<float> out(elements);
    if (dtype == NPUOPT_BF16) {
        std::vector<uint16_t> raw(elements);
        CUDA_OK(cudaMemcpy(raw.data(), device, elements * 2, cudaMemcpyDeviceToHost));
        for (int64_t i = 0; i < elements; ++i) {
            uint32_t bits = uint32_t(raw[i]) << 16;
            std::memcpy(&out[i], &bits, 4);
        }
    } else if (dtype == NPUOPT_F32) {
        CUDA_OK(cudaMemcpy(out.data(), device, elements * 4, cudaMemcpyDeviceToHost));
    } else {
        std::vector<int32_t> raw(elements);
        CUDA_OK(cudaMemcpy(raw.data(), device, elements * 4, cudaMemcpyDeviceToHost));
        for (int64_t i = 0; i < elements; ++i) out[i] = float(raw[i]);
    }
    return out;
}

std::string fingerprint(const void* device, int64_t bytes) {
    std::vector<unsigned char> raw(bytes);
    CUDA_OK(cudaMemcpy(raw.data(), device, bytes, cudaMemcpyDeviceToHost));
    uint64_t hash = 1469598103934665603ULL;
    for (unsigned char c : raw) hash = (hash ^ c) * 1099511628211ULL;
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(hash));
    return buffer;
}

Shape parse_shape(const std::string& text) {
    Shape shape;
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ',')) {
        if (item.empty()) continue;
        auto eq = item.find('=');
        if (eq == std::string::npos) fail("usage", "bad --shape item '" + item + "' (want k=v)", 2);
        shape[item.substr(0, eq)] = std::stoll(item.substr(eq + 1));
    }
    return shape;
}

struct Options {
    std::string command, file, kernel, cache_dir = default_cache_dir(), shape;
    uint64_t seed = 1;
    int repeat = 1;
    bool check = false, graph = false, flush = true;
    bool idle = false;  // --launch-mode idle: the stream is idle when the start event is recorded
};

using LaunchFn = int (*)(const NpuoptCtx*);
using WorkspaceFn = size_t (*)(const NpuoptCtx*);

int command_run(const Options& options) {
    const Shape shape = parse_shape(options.shape);
    auto defs = kernel_defs(options.kernel, shape);
    const KernelDef& def = defs.at(options.kernel);
    const std::string so = artifact_for(options.file, options.cache_dir, nullptr);

    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) fail("device", "no CUDA device visible to cudac", 1);
    CUDA_OK(cudaSetDevice(0));
    cudaDeviceProp props{};
    CUDA_OK(cudaGetDeviceProperties(&props, 0));

    void* handle = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) fail("device", std::string("cannot load the design: ") + ::dlerror(), 1);
    auto launch = reinterpret_cast<LaunchFn>(::dlsym(handle, "npuopt_launch"));
    auto workspace_fn = reinterpret_cast<WorkspaceFn>(::dlsym(handle, "npuopt_workspace_bytes"));
    if (!launch) fail("device", "the design defines no npuopt_launch (NPUOPT_EXPORT int npuopt_launch(const NpuoptCtx*))", 1);

    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t cublas;
    if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) fail("device", "cublasCreate failed", 1);
    cublasSetStream(cublas, stream);

    std::vector<void*> buffers(def.tensors.size());
    std::vector<NpuoptTensor> tensors(def.tensors.size());
    for (size_t i = 0; i < def.tensors.size(); ++i) {
        const auto& t = def.tensors[i];
        CUDA_OK(cudaMalloc(&buffers[i], std::max<int64_t>(t.elements * dtype_bytes(t.dtype), 16)));
        tensors[i] = {t.name.c_str(), buffers[i], t.elements, t.dtype};
    }
    std::vector<const char*> shape_names;
    std::vector<int64_t> shape_values;
    for (const auto& [name, value] : shape) { shape_names.push_back(name.c_str()); shape_values.push_back(value); }
    NpuoptCtx ctx{};
    ctx.abi = NPUOPT_ABI;
    ctx.kernel = options.kernel.c_str();
    ctx.shape_count = int(shape_names.size());
    ctx.shape_names = shape_names.data();
    ctx.shape_values = shape_values.data();
    ctx.tensor_count = int(tensors.size());
    ctx.tensors = tensors.data();
    ctx.stream = stream;
    ctx.cublas = cublas;
    ctx.sm_count = props.multiProcessorCount;
    ctx.l2_bytes = size_t(props.l2CacheSize);
    ctx.smem_per_block_optin = props.sharedMemPerBlockOptin;
    size_t workspace_bytes = workspace_fn ? workspace_fn(&ctx) : 0;
    void* workspace = nullptr;
    CUDA_OK(cudaMalloc(&workspace, std::max<size_t>(workspace_bytes, 256)));
    CUDA_OK(cudaMemset(workspace, 0, std::max<size_t>(workspace_bytes, 256)));
    ctx.workspace = workspace;
    ctx.workspace_bytes = workspace_bytes;

    const size_t flush_bytes = size_t(props.l2CacheSize) * 4;
    void* flush = nullptr;
    unsigned* flush_sink = nullptr;
    if (options.flush) {
        CUDA_OK(cudaMalloc(&flush, flush_bytes));
        CUDA_OK(cudaMalloc(&flush_sink, sizeof(unsigned)));
    }

    auto generate = [&](bool weights, int64_t repeat) {
        for (size_t i = 0; i < def.tensors.size(); ++i) {
            const auto& t = def.tensors[i];
            if (t.role == "output" || (t.role == "weight") != weights) continue;
            const uint64_t seed = mix(mix(options.seed, i + 1), weights ? ~0ULL : uint64_t(repeat + 1));
            const int64_t blocks = std::min<int64_t>((t.elements + 255) / 256, 4096);
            generate_kernel<<<unsigned(blocks), 256, 0, stream>>>(buffers[i], t.elements, t.dtype, seed, t.lo, t.hi);
        }
        CUDA_OK(cudaGetLastError());
    };
    auto poison = [&] {
        for (size_t i = 0; i < def.tensors.size(); ++i) {
            if (def.tensors[i].role != "output") continue;
            CUDA_OK(cudaMemsetAsync(buffers[i], 0xff, def.tensors[i].elements * dtype_bytes(def.tensors[i].dtype), stream));
        }
    };
    auto launch_checked = [&]() {
        int status = launch(&ctx);
        if (status != 0) fail("device", "npuopt_launch returned " + std::to_string(status) + " (shape not supported by the design?)", 1);
        cudaError_t error = cudaGetLastError();
        if (error != cudaSuccess) fail("device", std::string("launch failed: ") + cudaGetErrorString(error), 1);
    };

    generate(true, 0);
    // warm-up (module load, cuBLAS heuristics); graph capture when asked
    generate(false, -1);
    poison();
    launch_checked();
    CUDA_OK(cudaStreamSynchronize(stream));
    cudaGraphExec_t graph_exec = nullptr;
    if (options.graph) {
        cudaGraph_t graph;
        CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        launch_checked();
        CUDA_OK(cudaStreamEndCapture(stream, &graph));
        CUDA_OK(cudaGraphInstantiate(&graph_exec, graph, 0));
        CUDA_OK(cudaGraphLaunch(graph_exec, stream));  // first replay uploads the graph
        CUDA_OK(cudaStreamSynchronize(stream));
    }
    cudaEvent_t start, stop;
    CUDA_OK(cudaEventCreate(&start));
    CUDA_OK(cudaEventCreate(&stop));
    for (int repeat = 0; repeat < options.repeat; ++repeat) {
        generate(false, repeat);
        poison();
        if (flush) {  // write 4x L2, then read 2x L2 of it back: L2 cold for the kernel's data, and clean
            CUDA_OK(cudaMemsetAsync(flush, repeat & 0xff, flush_bytes, stream));
            clean_read_kernel<<<props.multiProcessorCount * 4, 256, 0, stream>>>(
                static_cast<const uint4*>(flush), int64_t(flush_bytes / 2 / 16), flush_sink);
            CUDA_OK(cudaGetLastError());
        }
        if (options.idle) CUDA_OK(cudaStreamSynchronize(stream));
        const auto wall_start = std::chrono::steady_clock::now();
        CUDA_OK(cudaEventRecord(start, stream));
        if (graph_exec) CUDA_OK(cudaGraphLaunch(graph_exec, stream));
        else launch_checked();
        CUDA_OK(cudaEventRecord(stop, stream));
        CUDA_OK(cudaEventSynchronize(stop));
        CUDA_OK(cudaGetLastError());
        const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start).count();
        float ms = 0;
        CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
        char line[512];
        std::snprintf(line, sizeof line,
                      "{\"type\":\"run\",\"kernel\":%s,\"seed\":%llu,\"repeat\":%d,\"cycles\":%.1f,\"wall_ms\":%.4f,\"unit\":\"ns\"}",
                      quoted(options.kernel).c_str(), static_cast<unsigned long long>(options.seed), repeat,
                      double(ms) * 1e6, wall_ms);
        emit(line);
    }
    CUDA_OK(cudaDeviceSynchronize());

    if (options.check && !def.tensors.empty()) {
        HostTensors host;
        for (size_t i = 0; i < def.tensors.size(); ++i) {
            const auto& t = def.tensors[i];
            if (t.role != "output") host[t.name] = to_host_floats(buffers[i], t.elements, t.dtype);
        }
        HostTensors ref = def.reference(host, shape);
        bool passed = true;
        double max_abs = 0, max_rel = 0;
        int64_t nonfinite_total = 0, elements_total = 0;
        std::string outputs;
        for (size_t i = 0; i < def.tensors.size(); ++i) {
            const auto& t = def.tensors[i];
            if (t.role != "output") continue;
            auto out = to_host_floats(buffers[i], t.elements, t.dtype);
            const auto& r = ref.at(t.name);
            double diff2 = 0, ref2 = 0, mean_abs = 0, ref_mean_abs = 0;
            int64_t nonfinite = 0;
            for (int64_t e = 0; e < t.elements; ++e) {
                if (!std::isfinite(out[e])) { ++nonfinite; continue; }
                const double d = double(out[e]) - r[e];
                diff2 += d * d;
                ref2 += double(r[e]) * r[e];
                max_abs = std::max(max_abs, std::fabs(d));
                mean_abs += std::fabs(out[e]);
                ref_mean_abs += std::fabs(r[e]);
            }
            const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
            max_rel = std::max(max_rel, rel);
            if (nonfinite > 0 || !(rel <= def.tolerance)) passed = false;
            nonfinite_total += nonfinite;
            elements_total += t.elements;
            char buffer[512];
            std::snprintf(buffer, sizeof buffer,
                          "%s{\"name\":%s,\"elements\":%lld,\"fingerprint\":\"%s\",\"mean_abs\":%.6g,\"ref_mean_abs\":%.6g,\"rel_norm_err\":%.3g}",
                          outputs.empty() ? "" : ",", quoted(t.name).c_str(), static_cast<long long>(t.elements),
                          fingerprint(buffers[i], t.elements * dtype_bytes(t.dtype)).c_str(), mean_abs / t.elements,
                          ref_mean_abs / t.elements, rel);
            outputs += buffer;
        }
        char line[512];
        std::snprintf(line, sizeof line,
                      "{\"type\":\"verify\",\"kernel\":%s,\"seed\":%llu,\"passed\":%s,\"max_abs_err\":%.6g,\"max_rel_err\":%.6g,"
                      "\"tolerance\":%.3g,\"mismatches\":%lld,\"nonfinite\":%lld,\"elements\":%lld,\"outputs\":[",
                      quoted(options.kernel).c_str(), static_cast<unsigned long long>(options.seed), passed ? "true" : "false",
                      max_abs, max_rel, def.tolerance, static_cast<long long>(passed ? 0 : std::max<int64_t>(nonfinite_total, 1)),
                      static_cast<long long>(nonfinite_total), static_cast<long long>(elements_total));
        emit(std::string(line) + outputs + "]}");
        return passed ? 0 : 1;
    }
    return 0;
}

int command_device() {
    int devices = 0;
    cudaError_t error = cudaGetDeviceCount(&devices);
    if (error != cudaSuccess || devices == 0) {
        emit("{\"type\":\"error\",\"kind\":\"device\",\"message\":" +
             quoted(std::string("no CUDA device: ") + (error != cudaSuccess ? cudaGetErrorString(error) : "none found")) + "}");
        return 77;
    }
    cudaDeviceProp props{};
    CUDA_OK(cudaGetDeviceProperties(&props, 0));
    int clock_khz = 0, mem_clock_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
    char line[1024];
    std::snprintf(line, sizeof line,
                  "{\"type\":\"device\",\"name\":%s,\"cc\":\"%d.%d\",\"sm_count\":%d,\"l2_bytes\":%d,\"global_bytes\":%zu,"
                  "\"smem_per_block_optin\":%zu,\"smem_per_sm\":%zu,\"regs_per_sm\":%d,\"max_threads_per_sm\":%d,"
                  "\"clock_khz\":%d,\"mem_clock_khz\":%d,\"bus_bits\":%d}",
                  quoted(props.name).c_str(), props.major, props.minor, props.multiProcessorCount, props.l2CacheSize,
                  props.totalGlobalMem, props.sharedMemPerBlockOptin, props.sharedMemPerMultiprocessor,
                  props.regsPerMultiprocessor, props.maxThreadsPerMultiProcessor, clock_khz, mem_clock_khz, bus_bits);
    emit(line);
    return 0;
}

int command_compile_or_check(const Options& options, bool compile) {
    if (options.file.empty()) fail("usage", std::string(compile ? "compile" : "check") + " needs a FILE", 2);
    bool ok = false;
    std::string source = read_file(options.file, &ok);
    if (!ok) fail("usage", "cannot read " + options.file, 2);
    CompileOutcome outcome;
    std::string artifact;
    if (compile) {
        if (options.cache_dir.empty()) fail("usage", "compile needs --cache-dir DIR", 2);
        ::mkdir(options.cache_dir.c_str(), 0755);
        const std::string key = cache_key(source);
        const std::string so = options.cache_dir + "/" + key + ".so";
        if (file_exists(so) && load_diag(so + ".diag", outcome)) {
            artifact = so;
        } else {
            outcome = compile_into(options.file, options.cache_dir, key);
            if (outcome.ok) artifact = so;
        }
    } else {
        artifact = artifact_for(options.file, options.cache_dir, &outcome);
    }
    for (const auto& line : outcome.lines) emit(line);
    char summary[1024];
    if (compile) {
        std::string sha = artifact.empty() ? "" : read_file(artifact + ".sha256");
        sha.erase(std::remove(sha.begin(), sha.end(), '\n'), sha.end());
        std::snprintf(summary, sizeof summary,
                      "{\"type\":\"compile\",\"ok\":%s,\"errors\":%d,\"warnings\":%d,\"compile_secs\":%.3f,\"artifact\":%s,\"sha256\":%s}",
                      outcome.ok ? "true" : "false", outcome.errors, outcome.warnings, outcome.secs,
                      artifact.empty() ? "null" : quoted(artifact).c_str(), sha.empty() ? "null" : quoted(sha).c_str());
    } else {
        std::snprintf(summary, sizeof summary, "{\"type\":\"check\",\"ok\":%s,\"errors\":%d,\"warnings\":%d,\"compile_secs\":%.3f}",
                      outcome.ok ? "true" : "false", outcome.errors, outcome.warnings, outcome.secs);
    }
    emit(summary);
    return outcome.ok ? 0 : 1;
}

[[noreturn]] void usage(const std::string& why) {
    fail("usage", why + " (usage: cudac --version | paths | device | compile FILE --cache-dir D | check FILE | "
                        "schedule FILE | run FILE --kernel K --seed S [--repeat N] [--shape k=v,...] [--check] [--graph] [--no-flush] [--launch-mode queued|idle])",
         2);
}

}  // namespace

int main(int argc, char** argv) {
    Options options;
    std::vector<std::string> positional;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(arg + " needs a value");
            return argv[++i];
        };
        if (arg == "--version") options.command = "version";
        else if (arg == "--message-format") value();
        else if (arg == "--kernel") options.kernel = value();
        else if (arg == "--seed") options.seed = std::stoull(value());
        else if (arg == "--repeat") options.repeat = std::max(1, std::stoi(value()));
        else if (arg == "--shape") options.shape = value();
        else if (arg == "--cache-dir") options.cache_dir = value();
        else if (arg == "--check") options.check = true;
        else if (arg == "--graph") options.graph = true;
        else if (arg == "--no-flush") options.flush = false;
        else if (arg == "--launch-mode") {
            const std::string mode = value();
            if (mode != "queued" && mode != "idle") usage("--launch-mode is queued or idle");
            options.idle = mode == "idle";
        }
        else if (arg.rfind("--", 0) == 0) usage("unknown option " + arg);
        else positional.push_back(arg);
    }
    if (options.command.empty()) {
        if (positional.empty()) usage("no command");
        options.command = positional[0];
        if (positional.size() > 1) options.file = positional[1];
    }
    if (options.command == "version") {
        emit("{\"type\":\"version\",\"name\":\"cudac\",\"version\":" + quoted(toolchain_version()) +
             ",\"nvcc\":" + quoted(nvcc_version()) + "}");
        return 0;
    }
    if (options.command == "paths") {
        emit("{\"type\":\"paths\",\"read_only\":[" + quoted(cuda_root()) + "," + quoted(cudac_root()) + "]}");
        return 0;
    }
    if (options.command == "device") return command_device();
    if (options.command == "compile") return command_compile_or_check(options, true);
    if (options.command == "check") return command_compile_or_check(options, false);
    if (options.command == "schedule") {
        emit("{\"type\":\"error\",\"kind\":\"usage\",\"message\":\"schedule is unsupported by cudac: no static estimate; npuopt ranks designs with the target's cost model\"}");
        return 2;
    }
    if (options.command == "run") {
        if (options.file.empty() || options.kernel.empty()) usage("run needs FILE and --kernel");
        return command_run(options);
    }
    usage("unknown command " + options.command);
}

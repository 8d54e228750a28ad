// `npuopt doctor` says how a call's memory and process count are limited on this machine.

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "proc/subprocess.hpp"

TEST_CASE("doctor reports the limit mechanism in use / and what it does not enforce") {
    const std::string command = std::string("'") + NPUOPT_BINARY + "' --json doctor --target npu-sim 2>/dev/null";
    FILE* pipe = popen(command.c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::string output;
    std::array<char, 4096> buffer{};
    while (std::size_t count = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), count);
    pclose(pipe);
    auto begin = output.find('{');
    REQUIRE(begin != std::string::npos);
    auto parsed = nlohmann::json::parse(output.substr(begin));
    const auto support = npuopt::proc::limit_support();
    const std::string mechanism(npuopt::proc::limit_mechanism_name(support.mechanism));
    CHECK(parsed["limit_mechanism"] == mechanism);
    bool found = false;
    for (const auto& check : parsed["checks"]) {
        if (check["name"] != "limits") continue;
        found = true;
        const std::string detail = check["detail"].get<std::string>();
        CHECK(detail.rfind(mechanism + ": ", 0) == 0);
        if (support.unenforced.empty()) {
            CHECK(check["status"] == "OK");
        } else {
            CHECK(check["status"] == "WARN");
            CHECK(detail.find("NOT enforced") != std::string::npos);
            CHECK_FALSE(check["fix"].get<std::string>().empty());
        }
    }
    CHECK(found);
}

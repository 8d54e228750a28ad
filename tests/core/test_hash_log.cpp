#include <doctest/doctest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/interrupt.hpp"
#include "core/log.hpp"

using namespace npuopt;

TEST_CASE("sha256 matches the FIPS 180-4 test vectors") {
    CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    CHECK(sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    Sha256 incremental;
    incremental.update("ab");
    incremental.update("c");
    auto digest = incremental.finish();
    CHECK(digest[0] == 0xba);
    CHECK(content_hash("x") != content_hash("y"));
}

TEST_CASE("log levels parse, unknown ones do not") {
    CHECK(log::parse_level("debug") == log::Level::debug);
    CHECK(log::parse_level("off") == log::Level::off);
    CHECK_FALSE(log::parse_level("loud"));
    CHECK(log::utc_timestamp().size() == 24);
}

TEST_CASE("the event log appends one JSON object per line") {
    std::random_device random;
    auto dir = std::filesystem::temp_directory_path() / ("npuopt-log-" + std::to_string(random()));
    std::filesystem::create_directories(dir);
    {
        log::EventLog events(dir / "events.jsonl");
        events.write("campaign_created", {{"target", "npu-sim"}});
        events.write("champion");
        CHECK_THROWS_AS(events.write("bad", nlohmann::json::array()), Error);
    }
    {
        log::EventLog reopened(dir / "events.jsonl");
        reopened.write("resumed", {{"step", 3}});
    }
    std::ifstream stream(dir / "events.jsonl");
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(stream, line);) lines.push_back(nlohmann::json::parse(line));
    REQUIRE(lines.size() == 3);
    CHECK(lines[0]["event"] == "campaign_created");
    CHECK(lines[0]["target"] == "npu-sim");
    CHECK(lines[0].contains("ts"));
    CHECK(lines[2]["step"] == 3);
    std::filesystem::remove_all(dir);
    CHECK_THROWS_AS(log::EventLog(dir / "no" / "such" / "events.jsonl"), Error);
}

TEST_CASE("SIGINT sets the interrupted flag and throw_if_interrupted raises the interrupted kind") {
    install_interrupt_handlers();
    CHECK_FALSE(interrupted());
    std::raise(SIGINT);
    CHECK(interrupted());
    try {
        throw_if_interrupted();
        FAIL("expected an Error");
    } catch (const Error& error) {
        CHECK(error.kind() == ErrorKind::interrupted);
    }
}

#pragma once
// Scratch directories and synthetic templates for search and campaign tests.

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace npuopt::test {

/// A scratch directory removed at scope exit.
struct ScratchDir {
    std::filesystem::path path;
    explicit ScratchDir(const std::string& tag = "search") {
        std::random_device random;
        path = std::filesystem::temp_directory_path() / ("npuopt-" + tag + "-" + std::to_string(random()));
        std::filesystem::create_directories(path);
    }
    ~ScratchDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
};

inline void write_text(const std::filesystem::path& file, const std::string& text) {
    std::filesystem::create_directories(file.parent_path());
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
}

/// A two-family toy target for kernel "toy" (shape n = 1024): tiles (ENGINES × PACKET × ROWS ×
/// BUFFERS, 96 designs) and stream (ENGINES × SPLIT, 12 designs), plus a baseline source.
inline void write_toy_templates(const std::filesystem::path& dir) {
    write_text(dir / "baseline_toy.rs", "// baseline toy kernel\nfn main() {}\n");
    write_text(dir / "toy_tiles.rs",
               "// tiles: engines ${ENGINES} packet ${PACKET} rows ${ROWS} buffers ${BUFFERS}\nfn main() {}\n");
    write_text(dir / "toy_tiles.template.yaml", R"(template: toy_tiles
kernel: toy
family: tiles
source: toy_tiles.rs
description: toy tiled design
params:
  ENGINES: {values: [1, 2, 4, 8], default: 1}
  PACKET:  {values: [256, 1024, 4096], default: 256}
  ROWS:    {values: [8, 16, 32, 64], default: 8}
  BUFFERS: {values: [1, 2], default: 1}
constraints:
  - "ROWS * n * BUFFERS <= 65536"
quantities:
  weight_bytes: "n * n"
  dma_commands: "ceil(n / ROWS) * 2"
  passes: "n / ROWS"
  packet_bytes: "PACKET"
  engine_index: "ENGINES - 1"
features:
  tile_bytes: "ROWS * n"
)");
    write_text(dir / "toy_stream.rs", "// stream: engines ${ENGINES} split ${SPLIT}\nfn main() {}\n");
    write_text(dir / "toy_stream.template.yaml", R"(template: toy_stream
kernel: toy
family: stream
source: toy_stream.rs
params:
  ENGINES: {values: [1, 2, 4, 8], default: 2}
  SPLIT:   {values: [1, 2, 4], default: 1}
quantities:
  weight_bytes: "n * n"
  dma_commands: "64 * SPLIT"
  passes: "256"
  packet_bytes: "1024"
  engine_index: "ENGINES - 1"
)");
}

}  // namespace npuopt::test

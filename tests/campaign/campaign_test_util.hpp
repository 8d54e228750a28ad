#pragma once
// What the campaign tests share: the toy target's hardware model (npu-sim's declared cost terms
// over round parameters).

#include <filesystem>
#include <memory>

#include "config/cost_model_config.hpp"
#include "knowledge/hardware_model.hpp"

namespace npuopt::test {

inline knowledge::HardwareModel toy_model() {
    knowledge::HardwareModel model;
    model.set("sustained_bytes_per_cycle", 1000.0);
    model.set("dma_engine_bytes_per_cycle", 100.0);
    model.set("dma_startup_cycles", 500.0);
    model.set("pass_issue_cycles", 600.0);
    model.cost_model = std::make_shared<config::CostModelSpec>(config::load_cost_model_config(
        std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/cost_model.yaml"));
    return model;
}

}  // namespace npuopt::test

# The pipeline benchmark (tools/bench/throughput_bench.cpp): builds <build>/tools/bench/throughput_bench,
# which `npuopt bench throughput` runs (needs npu-sim built: target npu_sim).
add_executable(npuopt_bench_throughput ${CMAKE_SOURCE_DIR}/tools/bench/throughput_bench.cpp)
target_link_libraries(npuopt_bench_throughput PRIVATE npuopt_report npuopt_warnings)
set_target_properties(npuopt_bench_throughput PROPERTIES OUTPUT_NAME throughput_bench
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tools/bench)
if(TARGET npu_sim)
  add_dependencies(npuopt_bench_throughput npu_sim)
endif()

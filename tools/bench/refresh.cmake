# The toolchain-update benchmark (tools/bench/refresh_bench.cpp): builds <build>/tools/bench/refresh_bench,
# which `npuopt bench refresh` runs (needs npu-sim 1.0 and 1.1 built: target npu_sim).
add_executable(npuopt_bench_refresh ${CMAKE_SOURCE_DIR}/tools/bench/refresh_bench.cpp)
target_link_libraries(npuopt_bench_refresh PRIVATE npuopt_report npuopt_warnings)
set_target_properties(npuopt_bench_refresh PROPERTIES OUTPUT_NAME refresh_bench
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tools/bench)
if(TARGET npu_sim)
  add_dependencies(npuopt_bench_refresh npu_sim)
endif()

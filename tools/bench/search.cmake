# The search benchmark (tools/bench/search_bench.cpp): include(tools/bench/search.cmake) from the
# top-level CMakeLists.txt after the layer libraries. Builds <build>/tools/bench/search_bench,
# which `npuopt bench search` runs (needs npu-sim built: target npu_sim).
add_executable(npuopt_bench_search ${CMAKE_SOURCE_DIR}/tools/bench/search_bench.cpp)
target_link_libraries(npuopt_bench_search PRIVATE npuopt_report npuopt_warnings)
set_target_properties(npuopt_bench_search PROPERTIES OUTPUT_NAME search_bench
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tools/bench)
if(TARGET npu_sim)
  add_dependencies(npuopt_bench_search npu_sim)
endif()

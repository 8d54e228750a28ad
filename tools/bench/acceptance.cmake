# The acceptance benchmark (tools/bench/acceptance.cpp): include(tools/bench/acceptance.cmake)
# from the top-level CMakeLists.txt after the layer libraries are defined. Builds
# <build>/tools/bench/acceptance; run it with --json (needs npu-sim built: target npu_sim).
add_executable(npuopt_bench_acceptance ${CMAKE_SOURCE_DIR}/tools/bench/acceptance.cpp)
target_link_libraries(npuopt_bench_acceptance PRIVATE npuopt_eval npuopt_config npuopt_target npuopt_warnings)
set_target_properties(npuopt_bench_acceptance PROPERTIES OUTPUT_NAME acceptance
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tools/bench)
if(TARGET npu_sim)
  add_dependencies(npuopt_bench_acceptance npu_sim)
endif()

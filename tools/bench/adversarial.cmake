# The adversarial benchmark (tools/bench/adversarial_*.cpp): include(tools/bench/adversarial.cmake)
# from the top-level CMakeLists.txt after the layer libraries. A library (the tests of
# tests/slow_eval link it) and <build>/tools/bench/adversarial_bench, which
# `npuopt bench adversarial` runs (needs npu-sim built: target npu_sim).
add_library(npuopt_bench_adversarial_lib STATIC ${CMAKE_SOURCE_DIR}/tools/bench/adversarial_bench.cpp)
target_include_directories(npuopt_bench_adversarial_lib PUBLIC ${CMAKE_SOURCE_DIR}/tools/bench)
target_link_libraries(npuopt_bench_adversarial_lib PUBLIC npuopt_report PRIVATE npuopt_warnings)
add_executable(npuopt_bench_adversarial ${CMAKE_SOURCE_DIR}/tools/bench/adversarial_main.cpp)
target_link_libraries(npuopt_bench_adversarial PRIVATE npuopt_bench_adversarial_lib npuopt_warnings)
set_target_properties(npuopt_bench_adversarial PROPERTIES OUTPUT_NAME adversarial_bench
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tools/bench)
if(TARGET npu_sim)
  add_dependencies(npuopt_bench_adversarial npu_sim)
endif()

# The LLM benchmark (tools/bench/llm_bench.cpp): builds <build>/tools/bench/llm_bench, which
# `npuopt bench llm` runs. Needs the scripted server (npuopt_llm_stub, cpp-httplib) and npu-sim.
if(TARGET npuopt_llm_stub)
  add_executable(npuopt_bench_llm ${CMAKE_SOURCE_DIR}/tools/bench/llm_bench.cpp)
  target_link_libraries(npuopt_bench_llm PRIVATE npuopt_report npuopt_llm_stub npuopt_warnings)
  set_target_properties(npuopt_bench_llm PROPERTIES OUTPUT_NAME llm_bench
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tools/bench)
  if(TARGET npu_sim)
    add_dependencies(npuopt_bench_llm npu_sim)
  endif()
endif()

# moe_add_test(name SOURCES a.cc ... LIBS x y LABELS cpu|mpi|gpu [blas] [NP n] [TIMEOUT s])
#   One GoogleTest binary. Without NP its tests are discovered one by one (ctest -L cpu runs them).
#   With NP it runs as a single CTest entry under `mpirun -np n`.
#   Label blas: the binary compares results across shapes, ranks, thread counts or layouts, or
#   checks the BLAS itself; tests/run.sh runs these again under each OpenBLAS kernel the CPU runs.
# moe_add_bench(name SOURCES ... LIBS ...)
#   One Google Benchmark binary (never run by CTest).
include(GoogleTest)

function(moe_add_test name)
  cmake_parse_arguments(ARG "" "NP;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT TARGET ${name})
    add_executable(${name} ${ARG_SOURCES})
    target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest moe_warnings)
    if(TARGET moe_test_pch)
      target_precompile_headers(${name} REUSE_FROM moe_test_pch)
    endif()
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  if(ARG_NP)
    set(_env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
             OPENBLAS_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none)
    add_test(NAME ${name}_np${ARG_NP}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ARG_NP} --oversubscribe
                     $<TARGET_FILE:${name}>)
    set_tests_properties(${name}_np${ARG_NP} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                         ENVIRONMENT "${_env}")
  else()
    target_link_libraries(${name} PRIVATE GTest::gtest_main)
    # The discovered tests' properties pass through flattened lists that lose a list-valued
    # label, so several labels become one ("cpu,blas"): ctest -L matches labels as regular
    # expressions, so -L cpu and -L blas both select it.
    string(REPLACE ";" "," _labels "${ARG_LABELS}")
    gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST
                         PROPERTIES LABELS "${_labels}" TIMEOUT ${ARG_TIMEOUT})
  endif()
endfunction()

function(moe_add_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} benchmark::benchmark moe_warnings)
endfunction()

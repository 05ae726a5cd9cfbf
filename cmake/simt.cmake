# simt: the CUDA backend's own sources on the CPU (tests/simt), so that its tests run everywhere.
# The kernels (.cu) compile as C++ through wrappers that include them; tests/simt/include stands in
# for the CUDA headers (runtime, bf16, cuBLASLt), tests/simt/*.cpp for the libraries (the runtime,
# cuBLASLt, cuDNN's attention). The namespace oomb::cuda becomes oomb::cuda_simt and
# make_cuda_backend make_simt_cuda_backend, so that a build with the real backend links both apart.
# The test_cuda_* suites build a second time against it, as simt.*, labelled simt.
file(GLOB OOMB_SIMT_CU CONFIGURE_DEPENDS src/backend/cuda/*.cu)
file(GLOB OOMB_SIMT_SRC CONFIGURE_DEPENDS src/backend/cuda/*.cpp tests/simt/*.cpp)
list(FILTER OOMB_SIMT_SRC EXCLUDE REGEX "cublaslt_lazy\\.cpp$")
# Two parts build a second time for the negative controls below: the attention kernels and the backend.
set(OOMB_SIMT_VARIANT ${CMAKE_SOURCE_DIR}/src/backend/cuda/cuda_backend.cpp)
list(REMOVE_ITEM OOMB_SIMT_SRC ${OOMB_SIMT_VARIANT})
foreach(cu ${OOMB_SIMT_CU})
  get_filename_component(n ${cu} NAME_WE)
  file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/simt/${n}.cpp CONTENT "#include \"${cu}\"\n")
  if(n MATCHES "^kernels_attention")
    list(APPEND OOMB_SIMT_VARIANT ${CMAKE_BINARY_DIR}/simt/${n}.cpp)
  else()
    list(APPEND OOMB_SIMT_SRC ${CMAKE_BINARY_DIR}/simt/${n}.cpp)
  endif()
endforeach()
find_package(Boost REQUIRED COMPONENTS context)  # the fibers (Debian's libboost-context-dev)
function(oomb_simt_target name)
  target_include_directories(${name} BEFORE PUBLIC tests/simt/include)
  target_compile_definitions(${name} PUBLIC OOMB_SIMT=1 cuda=cuda_simt make_cuda_backend=make_simt_cuda_backend)
  # bf16 storage read as 32-bit words, as nvcc allows. No contraction: nvcc contracts a * b + c into
  # an FMA by default, which x86-64's baseline cannot, so a kernel's arithmetic written without
  # __fmul_rn / __fadd_rn may differ from the GPU's in its last bits here (simt cannot catch a
  # missing _rn; the GPU run of test_cuda_ops' zero-tolerance optimizer checks can)
  target_compile_options(${name} PRIVATE -fno-strict-aliasing -ffp-contract=off -Wno-unknown-pragmas)
  target_link_libraries(${name} PUBLIC oomb_lib Boost::context)
  # cuDNN's stand-in (tests/simt/cudnn_sdpa.cpp) runs its graphs on the tests' interpreter (sdpa_graph_eval.cpp)
  target_link_libraries(${name} PRIVATE oomb_test_util)
endfunction()
add_library(oomb_simt_common OBJECT ${OOMB_SIMT_SRC})
oomb_simt_target(oomb_simt_common)
# oomb_simt, and the mutants: oomb_simt_<mutant> built with -DOOMB_MUTANT_<MUTANT>
foreach(lib simt simt_drop_query simt_skip_wait)
  add_library(oomb_${lib} STATIC ${OOMB_SIMT_VARIANT} $<TARGET_OBJECTS:oomb_simt_common>)
  oomb_simt_target(oomb_${lib})
endforeach()
target_compile_definitions(oomb_simt_drop_query PRIVATE OOMB_MUTANT_DROP_QUERY)
target_compile_definitions(oomb_simt_skip_wait PRIVATE OOMB_MUTANT_SKIP_WAIT)
# test_precision's CUDA test too (FlashAttention's rule for the GPU's bf16 step), not its CPU tests again.
foreach(name test_cuda_ops test_cuda_attention test_cuda_model test_cuda_features test_cuda_device test_cuda_timeline
             test_precision)
  add_executable(simt_${name} tests/${name}.cpp)
  target_link_libraries(simt_${name} PRIVATE oomb_simt oomb_test_util GTest::gtest GTest::gtest_main)
  set(filter "*")
  if(name STREQUAL "test_precision")
    set(filter "*Cuda*")
  endif()
  gtest_discover_tests(simt_${name} TEST_PREFIX "simt." TEST_FILTER ${filter} PROPERTIES LABELS simt
                       ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE" TIMEOUT ${OOMB_TEST_TIMEOUT} DISCOVERY_TIMEOUT 60)
endforeach()
# dist_check on the CUDA backend's code (simt_dist_check): two ranks over MPI's host staging, and MPI's
# group as device memory (NCCL's device-side packs and staging), run by test_dist_simt
if(TARGET dist_check)
  add_executable(simt_dist_check tests/dist/dist_check.cpp src/dist/nccl_stub.cpp)
  target_link_libraries(simt_dist_check PRIVATE oomb_simt oomb_test_util)
  target_compile_definitions(simt_dist_check PRIVATE OMPI_SKIP_MPICXX=1)
  add_dependencies(test_dist_simt simt_dist_check)
endif()
# oomb itself on the CUDA backend's code (simt_oomb): --device cuda through the command line. The two
# sources that reach the CUDA backend (make_backend; train's device limit and peak) build again here,
# their copies in oomb_lib left unlinked; so does NCCL's stub, so that no real NCCL is ever handed
# simt's streams (here and in simt_dist_check: --comm auto on a "cuda" backend would try it).
add_executable(simt_oomb src/cli/main.cpp src/cli/train_cmd.cpp src/backend/backend.cpp src/dist/nccl_stub.cpp)
target_link_libraries(simt_oomb PRIVATE oomb_simt)
target_compile_definitions(simt_oomb PRIVATE OOMB_VERSION="${PROJECT_VERSION}-simt")
add_dependencies(test_cli_simt simt_oomb oomb)
# what simt's barriers cost per thread (docs/BENCHMARKS.md; not a test)
add_executable(simt_costs tests/simt/bench/simt_costs.cpp)
target_link_libraries(simt_costs PRIVATE oomb_simt)
# simt's own checks, each against a small kernel (tests/simt/tests)
add_executable(simt_test_simt tests/simt/tests/test_simt.cpp)
target_link_libraries(simt_test_simt PRIVATE oomb_simt GTest::gtest GTest::gtest_main)
gtest_discover_tests(simt_test_simt TEST_PREFIX "simt." PROPERTIES LABELS simt TIMEOUT ${OOMB_TEST_TIMEOUT}
                     DISCOVERY_TIMEOUT 60)
# simt garbles static __shared__ per block only outside function templates (GCC ignores the section there)
add_test(NAME simt.lint.StaticSharedOutsideTemplates COMMAND ${OOMB_TORCH_PYTHON}
         ${CMAKE_SOURCE_DIR}/tests/simt/lint_static_shared.py ${OOMB_SIMT_CU})
add_test(NAME simt.lint.SelfTest COMMAND ${OOMB_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}/tests/simt/lint_static_shared.py
         --self-test)
set_tests_properties(simt.lint.StaticSharedOutsideTemplates simt.lint.SelfTest PROPERTIES LABELS simt)
# Negative controls, each test required to fail (WILL_FAIL): the attention kernels dropping the chunk's
# last query (the fp32 kernels' test and the tensor cores'); the backend's streams not waiting for each
# other's events (simt runs a stream's work as late as CUDA allows, so the offloaded run reads pages
# not yet copied).
function(oomb_simt_mutant mutant test_src test)
  set(exe simt_${test_src}_${mutant})
  if(NOT TARGET ${exe})
    add_executable(${exe} tests/${test_src}.cpp)
    target_link_libraries(${exe} PRIVATE oomb_simt_${mutant} oomb_test_util GTest::gtest GTest::gtest_main)
  endif()
  add_test(NAME simt.mutant_${mutant}.${test}_must_fail COMMAND ${exe} --gtest_filter=${test})
  set_tests_properties(simt.mutant_${mutant}.${test}_must_fail PROPERTIES WILL_FAIL TRUE LABELS simt
                       ENVIRONMENT "OOMB_TEST_TMP_TAG=mutant_${mutant}" TIMEOUT ${OOMB_TEST_TIMEOUT})
endfunction()
oomb_simt_mutant(drop_query test_cuda_attention CudaAttention.AttentionOverBlocks)
oomb_simt_mutant(drop_query test_cuda_attention CudaAttention.AttentionOnTensorCoresWithinBf16)
oomb_simt_mutant(skip_wait test_cuda_model CudaModel.OffloadParamsBf16MatchesTheResidentBf16Run)
oomb_simt_mutant(skip_wait test_cuda_features CudaFeatures.OffloadParamsStepsTrackTheResidentRun)
# The other orders (OOMB_SIMT_ORDER=reverse: threads, blocks and the streams a synchronizing call drains,
# last to first), and a cuBLASLt offering no bias epilogue (gemm.cpp's fallback kernel).
add_test(NAME simt.reverse.CudaOps COMMAND simt_test_cuda_ops)
add_test(NAME simt.reverse.CudaAttention COMMAND simt_test_cuda_attention)
add_test(NAME simt.reverse.CudaModel.Offload COMMAND simt_test_cuda_model --gtest_filter=CudaModel.Offload*)
add_test(NAME simt.reverse.CudaFeatures.Offload COMMAND simt_test_cuda_features
         --gtest_filter=CudaFeatures.OffloadParamsSteps*)
set_tests_properties(simt.reverse.CudaOps simt.reverse.CudaAttention simt.reverse.CudaModel.Offload simt.reverse.CudaFeatures.Offload
                     PROPERTIES LABELS simt
                     ENVIRONMENT "OOMB_SIMT_ORDER=reverse;OMP_WAIT_POLICY=PASSIVE;OOMB_TEST_TMP_TAG=reverse"
                     TIMEOUT ${OOMB_TEST_TIMEOUT})
add_test(NAME simt.no_bias_epilogue.CudaOps.Linear COMMAND simt_test_cuda_ops --gtest_filter=CudaOps.*Linear*)
set_tests_properties(simt.no_bias_epilogue.CudaOps.Linear PROPERTIES LABELS simt
                     ENVIRONMENT "OOMB_SIMT_CUBLASLT_NO_BIAS=1;OOMB_TEST_TMP_TAG=no_bias" TIMEOUT ${OOMB_TEST_TIMEOUT})

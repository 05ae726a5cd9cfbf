# Builds each tests/fuzz/fuzz_*.cpp with clang -fsanitize=fuzzer,address,undefined in a sub-build,
# since the main build uses g++. ctest runs each for a short, fixed number of runs.
set(OOMB_FUZZ_RUNS 20000 CACHE STRING "libFuzzer runs per target under ctest")
file(GLOB OOMB_FUZZERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_*.cpp)
set(FUZZ_DIR ${CMAKE_BINARY_DIR}/fuzz)
set(FUZZ_SANITIZE -fsanitize=address,undefined -fno-sanitize-recover=undefined)
set(FUZZ_CXX -std=c++20 -O1 -g ${FUZZ_SANITIZE} -I${CMAKE_SOURCE_DIR}/src)
# Each engine source compiles once into fuzz/obj/ (its path under the source tree kept, so no two
# share an object; instrumented for coverage, not linked with libFuzzer's main), shared by every
# fuzzer that lists it; clang's depfiles track the headers. (Ninja builds a shared object once; the
# Makefile generators would build it once per fuzzer, side by side: the project configures Ninja.)
function(oomb_fuzz_object src out)
  file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${src})
  set(obj ${FUZZ_DIR}/obj/${rel}.o)
  get_filename_component(objdir ${obj} DIRECTORY)
  get_property(done GLOBAL PROPERTY OOMB_FUZZ_OBJECTS)
  if(NOT obj IN_LIST done)
    add_custom_command(OUTPUT ${obj}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${objdir}
      COMMAND ${OOMB_CLANGXX} ${FUZZ_CXX} -fsanitize=fuzzer-no-link -MD -MT ${obj} -MF ${obj}.d -c ${src} -o ${obj}
      DEPENDS ${src} DEPFILE ${obj}.d VERBATIM)
    set_property(GLOBAL APPEND PROPERTY OOMB_FUZZ_OBJECTS ${obj})
  endif()
  set(${out} ${obj} PARENT_SCOPE)
endfunction()
foreach(src ${OOMB_FUZZERS})
  get_filename_component(name ${src} NAME_WE)
  # each fuzzer lists the engine sources it needs on a line "// fuzz-sources: a.cpp b.cpp"
  file(STRINGS ${src} srcline REGEX "^// fuzz-sources:")
  string(REPLACE "// fuzz-sources:" "" srcline "${srcline}")
  separate_arguments(deps UNIX_COMMAND "${srcline}")
  # and, optionally, the libraries on a line "// fuzz-libs: -lx -ly"
  file(STRINGS ${src} libline REGEX "^// fuzz-libs:")
  string(REPLACE "// fuzz-libs:" "" libline "${libline}")
  separate_arguments(libs UNIX_COMMAND "${libline}")
  # and, optionally, fewer runs for a slow target: "// fuzz-runs: N"
  file(STRINGS ${src} runsline REGEX "^// fuzz-runs:")
  string(REPLACE "// fuzz-runs:" "" runs "${runsline}")
  string(STRIP "${runs}" runs)
  if(runs STREQUAL "")
    set(runs ${OOMB_FUZZ_RUNS})
  endif()
  set(objs "")
  foreach(d ${deps})
    get_filename_component(dep ${CMAKE_SOURCE_DIR}/src/${d} ABSOLUTE)
    oomb_fuzz_object(${dep} obj)
    list(APPEND objs ${obj})
  endforeach()
  # (the fuzzer's own depfile under obj/: `make fuzz` runs whatever fuzz/fuzz_* holds)
  add_custom_command(OUTPUT ${FUZZ_DIR}/${name}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${FUZZ_DIR}/obj
    COMMAND ${OOMB_CLANGXX} ${FUZZ_CXX} -fsanitize=fuzzer -MD -MT ${FUZZ_DIR}/${name} -MF ${FUZZ_DIR}/obj/${name}.d
            -DOOMB_SOURCE_DIR="${CMAKE_SOURCE_DIR}" ${src} ${objs} -lfmt ${libs} -o ${FUZZ_DIR}/${name}
    DEPENDS ${src} ${objs} DEPFILE ${FUZZ_DIR}/obj/${name}.d VERBATIM)
  add_custom_target(${name} ALL DEPENDS ${FUZZ_DIR}/${name})
  set(corpus ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${name})
  # reproducible: every run starts from a fresh copy of the committed seed corpus (never one grown by
  # earlier runs) with a fixed seed; the seeds themselves are only read
  set(work ${FUZZ_DIR}/${name}.ctest.corpus)  # *.corpus: `make fuzz` skips it
  add_test(NAME ${name}
    COMMAND sh -c "rm -rf ${work} && mkdir -p ${work} && if [ -d ${corpus} ]; then cp -R ${corpus}/. ${work}/; fi && exec ${FUZZ_DIR}/${name} -runs=${runs} -seed=1 -timeout=30 -max_len=4096 ${work}")
  set_tests_properties(${name} PROPERTIES LABELS "cpu;fuzz" TIMEOUT ${OOMB_TEST_TIMEOUT})
endforeach()

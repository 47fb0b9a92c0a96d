# CtcModel.cmake - compile PyTorch model files with ctc as a build step (docs/build-systems.md).
#
#   list(APPEND CMAKE_MODULE_PATH /path/to/ctc/cmake)
#   include(CtcModel)
#   ctc_add_model(mlp model.py [ENTRY train_step ...] [ARGS --input x=f32[1,784] ...])
#   add_executable(app main.c)
#   target_link_libraries(app PRIVATE mlp)      # mlp.h is on mlp's include path
#
# ctc_add_model(TARGET MODEL [ENTRY name...] [ARGS arg...]) runs
#   ctc compile MODEL -o <binary dir>/TARGET.c --name TARGET [--entry name...] [arg...] --depfile ...
# as a custom command with a DEPFILE, so the model is compiled again when MODEL or any
# Python file it imports from beside it changes (and when ctc itself does), and makes
# TARGET a static library of the generated TARGET.c with ctc's runtime (one `ctc_runtime`
# library per project; OpenMP when CMake finds it). The generated C symbols are prefixed
# with TARGET (`TARGET_init`, `TARGET_forward`, ...; ARGS may hold another --name).
#
# Variables: CTC_EXECUTABLE (the ctc program; default: ctc beside this file's repository,
# build/ctc, else on PATH) and CTC_RUNTIME_DIR (runtime_min/ of that repository).
# Needs CMake 3.20 (DEPFILE with Makefile generators).
cmake_minimum_required(VERSION 3.20)

get_filename_component(_ctc_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
find_program(CTC_EXECUTABLE ctc HINTS "${_ctc_root}/build" DOC "the ctc compiler")
set(CTC_RUNTIME_DIR "${_ctc_root}/runtime_min" CACHE PATH "ctc's runtime (runtime_min/)")

function(_ctc_runtime_library)
  if(TARGET ctc_runtime)
    return()
  endif()
  set(_rt rt_error.c rt_safetensors.c rt_npy.c rt_model.c rt_driver.c rt_train.c rt_gradcheck.c
          rt_data.c rt_pt.c rt_profile.c rt_text.c)
  list(TRANSFORM _rt PREPEND "${CTC_RUNTIME_DIR}/")
  add_library(ctc_runtime STATIC ${_rt})
  target_include_directories(ctc_runtime PUBLIC "${CTC_RUNTIME_DIR}")
  set_target_properties(ctc_runtime PROPERTIES C_STANDARD 11 POSITION_INDEPENDENT_CODE ON)
  find_package(ZLIB REQUIRED)
  target_link_libraries(ctc_runtime PUBLIC ZLIB::ZLIB m)
endfunction()

function(ctc_add_model target model)
  cmake_parse_arguments(PARSE_ARGV 2 CTC "" "" "ENTRY;ARGS")
  if(NOT CTC_EXECUTABLE)
    message(FATAL_ERROR "ctc_add_model: ctc not found: set CTC_EXECUTABLE")
  endif()
  get_filename_component(_model "${model}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  set(_c "${CMAKE_CURRENT_BINARY_DIR}/${target}.c")
  set(_h "${CMAKE_CURRENT_BINARY_DIR}/${target}.h")
  set(_entries)
  foreach(_e IN LISTS CTC_ENTRY)
    list(APPEND _entries --entry "${_e}")
  endforeach()
  add_custom_command(
    OUTPUT "${_c}" "${_h}"
    COMMAND "${CTC_EXECUTABLE}" compile "${_model}" -o "${_c}" --name "${target}" ${_entries} ${CTC_ARGS}
            --depfile "${_c}.d"
    DEPENDS "${_model}" "${CTC_EXECUTABLE}"
    DEPFILE "${_c}.d"
    COMMENT "ctc: compiling ${model}"
    VERBATIM)
  _ctc_runtime_library()
  add_library(${target} STATIC "${_c}" "${_h}")
  target_include_directories(${target} PUBLIC "${CMAKE_CURRENT_BINARY_DIR}")
  set_target_properties(${target} PROPERTIES C_STANDARD 11)
  # as ctc build: no errno from sqrtf, no trapping adds, so those loops vectorise (same values)
  target_compile_options(${target} PRIVATE "$<$<C_COMPILER_ID:GNU,Clang>:-fno-math-errno;-fno-trapping-math>")
  target_link_libraries(${target} PUBLIC ctc_runtime)
  find_package(OpenMP QUIET COMPONENTS C)
  if(OpenMP_C_FOUND)
    target_link_libraries(${target} PUBLIC OpenMP::OpenMP_C)
  endif()
endfunction()

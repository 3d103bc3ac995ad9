# find_package(SluiceSDK) gives the target Sluice::sdk and the function
# sluice_add_plugin(<target> <sources>...), which builds libsluice-<target>.so. When the SDK
# was built with GoogleTest, it also gives Sluice::storage_conformance, the storage
# conformance kit (docs/plugin-sdk.md); using it needs GTest found here as well.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(Boost 1.81 COMPONENTS json)
find_package(GTest QUIET)
include(${CMAKE_CURRENT_LIST_DIR}/SluiceSDKTargets.cmake)

function(sluice_add_plugin target)
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE Sluice::sdk)
  set_target_properties(${target} PROPERTIES PREFIX "lib" OUTPUT_NAME "sluice-${target}"
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
endfunction()

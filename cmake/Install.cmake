# `cmake --install`: libweft.so (versioned, SONAME libweft.so.MAJOR), the public headers,
# the weft command and the scripts it runs, and what lets other builds find the library:
# weftConfig.cmake (find_package(weft), imported target weft::weft) and weft.pc
# (pkg-config weft). tests/consumer/ builds against the installed tree (scripts/test-install).
include(CMakePackageConfigHelpers)

install(TARGETS weft EXPORT weftTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/weft DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS weft_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The weft command finds these in PREFIX/share/weft/ (tools/diag/script.cc).
install(PROGRAMS scripts/plot-probe scripts/plot-bench DESTINATION ${CMAKE_INSTALL_DATADIR}/weft)

set(WEFT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
install(EXPORT weftTargets NAMESPACE weft:: DESTINATION ${WEFT_CMAKE_DIR})
configure_package_config_file(cmake/weftConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/weftConfig.cmake INSTALL_DESTINATION ${WEFT_CMAKE_DIR})
# 0.x: only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/weftConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/weftConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/weftConfigVersion.cmake
        DESTINATION ${WEFT_CMAKE_DIR})

file(RELATIVE_PATH WEFT_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/weft.pc.in ${CMAKE_CURRENT_BINARY_DIR}/weft.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/weft.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

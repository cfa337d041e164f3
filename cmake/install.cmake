# Installs the headers, the library and a CMake package: find_package(tigon) -> tigon::tigon.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS tigon EXPORT tigonTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT cpp
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT cpp
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cpp)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tigon DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT cpp)
install(EXPORT tigonTargets NAMESPACE tigon:: FILE tigonTargets.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tigon COMPONENT cpp)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tigonConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tigonConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tigon)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tigonConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tigonConfig.cmake ${PROJECT_BINARY_DIR}/tigonConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tigon COMPONENT cpp)

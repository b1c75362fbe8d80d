# gemma4::image — PNG and JPEG decoding for include/gemma4/multimodal/image_decode.hpp and
# image.hpp. Kept apart from gemma4::gemma4 so that consumers who do not decode images need
# neither libpng nor libjpeg. Debian packages: libpng-dev, libjpeg-dev (libjpeg62-turbo-dev).
find_package(PNG QUIET)
find_package(JPEG QUIET)

if(PNG_FOUND AND JPEG_FOUND)
  add_library(gemma4_image INTERFACE)
  add_library(gemma4::image ALIAS gemma4_image)
  set_target_properties(gemma4_image PROPERTIES EXPORT_NAME image)
  target_link_libraries(gemma4_image INTERFACE gemma4 PNG::PNG JPEG::JPEG)

  # Its own export set, loaded by gemma4Config.cmake only when libpng and libjpeg are found.
  install(TARGETS gemma4_image EXPORT gemma4ImageTargets)
  install(EXPORT gemma4ImageTargets NAMESPACE gemma4:: DESTINATION ${CMAKE_INSTALL_DATADIR}/cmake/gemma4)

elseif(GEMMA4_BUILD_EXAMPLES OR GEMMA4_BUILD_TESTS)
  message(FATAL_ERROR "gemma4: the command-line program and the tests decode images and need libpng and "
                      "libjpeg (Debian: apt-get install libpng-dev libjpeg-dev), or configure with "
                      "-DGEMMA4_BUILD_EXAMPLES=OFF -DGEMMA4_BUILD_TESTS=OFF")
else()
  message(STATUS "gemma4: libpng or libjpeg not found; gemma4::image (image decoding) is not available")
endif()

# Debian's xsimd 8.1 package exports a link to a library named "xtl" that it does not ship
# (xtl is an optional header-only dependency); without xtl installed every consumer fails to
# link with -lxtl. Drop the dangling name when no xtl target exists.
if(TARGET xsimd AND NOT TARGET xtl)
  get_target_property(_gemma4_xsimd_libs xsimd INTERFACE_LINK_LIBRARIES)
  if(_gemma4_xsimd_libs)
    list(REMOVE_ITEM _gemma4_xsimd_libs xtl)
    set_target_properties(xsimd PROPERTIES INTERFACE_LINK_LIBRARIES "${_gemma4_xsimd_libs}")
  endif()
  unset(_gemma4_xsimd_libs)
endif()

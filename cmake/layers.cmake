# Layer check: every #include "dir/file.h" under src/ points to the same
# layer or one below it (docs/architecture.md, "Layers").  Run as a build
# step (the layer_check target, before any object is compiled) and by
# spec/unit/layers_spec.lua:
#
#   cmake -DSRC=<src dir> [-DEXCEPTIONS=<file>] -P cmake/layers.cmake
#
# Fails with one line per upward include:
#   src/X/y.c includes src/Z/w.h: layer X may not include layer Z
#
# A layer's rank; a file may include its own rank or lower ones.  The
# files directly in src/ (main.c, cli.c, rmq_so.c) are the binaries' entry
# points: above every layer.
cmake_policy(VERSION 3.16)
set(RMQ_LAYERS
    core=0
    net=1 store=1
    proto=2
    route=3 broker=3 ha=3 acl=3 filter=3 grpc=3
    runtime=4
    lua=5
    server=6 tools=6)

if(NOT SRC)
    message(FATAL_ERROR "layers.cmake: -DSRC=<the src directory> is required")
endif()
get_filename_component(SRC "${SRC}" ABSOLUTE)
foreach(pair IN LISTS RMQ_LAYERS)
    string(REPLACE "=" ";" kv "${pair}")
    list(GET kv 0 name)
    list(GET kv 1 rank)
    set(rank_${name} ${rank})
endforeach()

# The known departures still in the code, one "LAYER HEADER" a line (# for
# the reason); each is named so that no other upward include can join them.
set(allowed "")
if(EXCEPTIONS AND EXISTS "${EXCEPTIONS}")
    file(STRINGS "${EXCEPTIONS}" lines)
    foreach(line IN LISTS lines)
        string(REGEX REPLACE "#.*" "" line "${line}")
        string(STRIP "${line}" line)
        if(line STREQUAL "")
            continue()
        endif()
        string(REGEX REPLACE "[ \t]+" " " line "${line}")
        list(APPEND allowed "${line}")
    endforeach()
endif()

file(GLOB_RECURSE files RELATIVE "${SRC}" "${SRC}/*.c" "${SRC}/*.h")
list(SORT files)
set(errors "")
set(used "")
foreach(f IN LISTS files)
    if(NOT f MATCHES "^([a-z_]+)/[^/]+$")
        continue()   # an entry point in src/ itself
    endif()
    set(from "${CMAKE_MATCH_1}")
    if(NOT DEFINED rank_${from})
        list(APPEND errors "src/${f}: layer ${from} has no rank in cmake/layers.cmake")
        continue()
    endif()
    file(STRINGS "${SRC}/${f}" incs REGEX "^[ \t]*#[ \t]*include[ \t]*\"[a-z_]+/[^\"]+\"")
    foreach(inc IN LISTS incs)
        string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([a-z_]+)/([^\"]+)\".*" "\\1;\\2" parts "${inc}")
        list(GET parts 0 to)
        list(GET parts 1 header)
        if(NOT DEFINED rank_${to})
            continue()   # not one of ours (a generated or system path)
        endif()
        if(rank_${to} GREATER rank_${from})
            if("${from} ${to}/${header}" IN_LIST allowed)
                list(APPEND used "${from} ${to}/${header}")
                continue()
            endif()
            list(APPEND errors "src/${f} includes src/${to}/${header}: layer ${from} may not include layer ${to}")
        endif()
    endforeach()
endforeach()
# An exception the code no longer needs goes too: the list only shrinks.
foreach(a IN LISTS allowed)
    if(NOT a IN_LIST used)
        list(APPEND errors "${EXCEPTIONS}: \"${a}\" is no longer needed: remove it")
    endif()
endforeach()
if(errors)
    # One unwrapped line each (a FATAL_ERROR's text is re-flowed).
    foreach(e IN LISTS errors)
        message(NOTICE "${e}")
    endforeach()
    list(LENGTH errors n)
    message(FATAL_ERROR "${n} layer error(s) (docs/architecture.md, Layers)")
endif()

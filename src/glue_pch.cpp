// The one source of posenc_glue_pch: a target that exists to build src/pch.h
// at -O1 for the command-line tool and the tests (see CMakeLists.txt).

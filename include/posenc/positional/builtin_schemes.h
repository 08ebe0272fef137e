// Registry entries of the built-in schemes, one function per scheme, each
// defined in the source file of its family. registry.cpp lists them.
#pragma once

#include "posenc/positional/registry.h"

namespace posenc {

// absolute.cpp: embedding-time schemes
SchemeInfo none_scheme_info();
SchemeInfo sinusoidal_scheme_info();
SchemeInfo learned_scheme_info();
SchemeInfo dynamic_scheme_info();

// rotary.cpp
SchemeInfo rope_scheme_info();
SchemeInfo xpos_scheme_info();

// bias.cpp: additive attention biases
SchemeInfo t5_scheme_info();
SchemeInfo ape_scheme_info();
SchemeInfo decay_scheme_info();

// extrapolation_bias.cpp: biases for length extrapolation, ALiBi and those after it
SchemeInfo alibi_scheme_info();
SchemeInfo kerple_scheme_info();
SchemeInfo sandwich_scheme_info();
SchemeInfo fire_scheme_info();

// relative_attention.cpp: score (and value) terms
SchemeInfo shaw_scheme_info();
SchemeInfo xl_scheme_info();

// contextual.cpp: positions counted from the content
SchemeInfo cope_scheme_info();
SchemeInfo fox_scheme_info();

// householder.cpp: a product of data-dependent Householder-like matrices between query and key (PaTH)
SchemeInfo path_scheme_info();

// distance_aware.cpp: multiplicative reweighting of the scores (DA)
SchemeInfo da_scheme_info();

// adaptive.cpp: a bias refined by the content of each score
SchemeInfo dape_scheme_info();

}  // namespace posenc

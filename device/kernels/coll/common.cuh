// What every collective kernel file includes: the building blocks of the protocols (LL, HB)
// with their invariants (weft/collective.cuh), and their namespaces.
#pragma once
#include "weft/collective.cuh"
#include "weft/trace.cuh"

using namespace weft;
using namespace weft::coll;

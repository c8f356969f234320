// Parhelion: a C++ tile-kernel language and autotuning compiler. Include this header.
#pragma once

#include "parhelion/array.h"
#include "parhelion/collectives.h"
#include "parhelion/config.h"
#include "parhelion/config_table.h"
#include "parhelion/dtype.h"
#include "parhelion/error.h"
#include "parhelion/kernel.h"
#include "parhelion/lang.h"
#include "parhelion/mesh.h"
#include "parhelion/tpu.h"
#include "parhelion/tune.h"

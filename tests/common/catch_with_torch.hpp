// Include this FIRST in a test that uses LibTorch.
// Note [Two CHECKs]: LibTorch's glog shim (c10/util/logging_is_not_google_glog.h) defines CHECK as a
// fatal assertion, silently replacing Catch's CHECK (system headers do not warn on redefinition), so
// failed checks would abort instead of being reported. LibTorch goes first, then Catch takes CHECK back.
#pragma once

#include <torch/torch.h>

#undef CHECK
#include "memcomm_test.hpp"

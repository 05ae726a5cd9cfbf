// simt's cuDNN stand-in (tests/simt/cudnn_sdpa.cpp) counts the calls issued to it, so a test can
// tell which attention calls took cuDNN's route. Only in simt builds (OOMB_SIMT).
#pragma once

#include <cstddef>

namespace oomb::cuda::cudnn {

size_t simt_calls();  // every forward and backward issued so far

}  // namespace oomb::cuda::cudnn

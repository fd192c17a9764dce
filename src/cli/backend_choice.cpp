#include "cli/backend_choice.h"

#include <string>

#include "backends/cpu/cpu_backend.h"
#if defined(TERN_HAVE_CUDA)
#include "backends/cuda/cuda_backend.h"
#endif

namespace tern::cli {

std::vector<std::string_view> backend_names() {
#if defined(TERN_HAVE_CUDA)
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

Result<std::unique_ptr<Backend>> make_backend(std::string_view name, int n_threads) {
  if (name == "cpu") {
    TERN_CHECK(n_threads > 0);
    return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{n_threads, false}));
  }
  if (name == "cuda") {
#if defined(TERN_HAVE_CUDA)
    return cuda::create_backend();
#else
    return error("--backend cuda: this tern was built without CUDA (configure with -DTERN_CUDA=ON and nvcc)");
#endif
  }
  std::string choices;
  for (std::string_view n : backend_names()) choices += (choices.empty() ? "" : ", ") + std::string(n);
  return error("--backend: expected one of " + choices + ", got '" + std::string(name) + "'");
}

}  // namespace tern::cli

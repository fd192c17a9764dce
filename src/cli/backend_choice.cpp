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

Result<std::unique_ptr<Backend>> make_backend(std::string_view name, int n_threads, int act_bits) {
  TERN_CHECK(act_bits == 8 || act_bits == 16);
  if (name == "cpu") {
    TERN_CHECK(n_threads > 0);
    cpu::CpuBackendOptions o;
    o.n_threads = n_threads;
    o.activation_bits = act_bits;
    return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>(o));
  }
  if (name == "cuda") {
#if defined(TERN_HAVE_CUDA)
    cuda::CudaBackendOptions o;
    o.act_bits = act_bits;
    return cuda::create_backend(o);
#else
    return error("--backend cuda: this tern was built without CUDA (configure with -DTERN_CUDA=ON and nvcc)");
#endif
  }
  std::string choices;
  for (std::string_view n : backend_names()) choices += (choices.empty() ? "" : ", ") + std::string(n);
  return error("--backend: expected one of " + choices + ", got '" + std::string(name) + "'");
}

void add_backend_flags(CLI::App& cmd, std::string& backend, int& act_bits) {
  cmd.add_option("--backend", backend, "compute backend: cpu or cuda")->check(CLI::IsMember(backend_names()));
  cmd.add_option("--act-bits", act_bits,
                 "precision of the activations that meet quantized weights: 16 (default) or 8 (llama.cpp's; faster "
                 "prefill and batches, logits off by up to ~1)")
      ->check(CLI::IsMember({8, 16}));
}

}  // namespace tern::cli

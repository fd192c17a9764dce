#include "backends/cuda/tc_gemm.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "core/check.h"

namespace tern::cuda {

// The cuBLASLt entry points tern uses, resolved from the shared library. The header supplies
// the types and prototypes only; nothing links against the library.
struct CublasLtApi {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtGetStatusString) status_string;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
};

namespace {

// cuBLAS recommends 32 MiB of workspace on Hopper (split-K and stream-K kernels use it).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// The library of the major version tern was compiled against: the default search path first,
// then the toolkit's usual homes (a toolkit install is often not on the loader's path).
void* open_library(std::string& tried) {
  const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::vector<std::string> candidates = {name};
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* root = std::getenv(var); root != nullptr && *root) {
      candidates.push_back(std::string(root) + "/lib64/" + name);
    }
  }
  candidates.push_back("/usr/local/cuda/lib64/" + name);
  candidates.push_back("/usr/local/cuda-" + std::to_string(CUBLAS_VER_MAJOR) + "/lib64/" + name);
  for (const std::string& path : candidates) {
    // Never dlclose'd: kernels and static state of the library may outlive any one backend.
    if (void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + path + (why != nullptr ? std::string(" (") + why + ")" : std::string());
  }
  return nullptr;
}

template <typename Fn>
bool resolve(void* lib, const char* symbol, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(lib, symbol));
  return out != nullptr;
}

// Loaded once per process; nullptr with `error` set when the library is unusable.
const CublasLtApi* load_api(std::string& error) {
  static CublasLtApi api;
  static std::string load_error;
  static const bool loaded = [] {
    std::string tried;
    void* lib = open_library(tried);
    if (lib == nullptr) {
      load_error = "cuda: the tensor-core prefill needs cuBLASLt " + std::to_string(CUBLAS_VER_MAJOR) +
                   ", and none of these loaded: " + tried + " (install cuBLAS, set CUDA_HOME, or turn " +
                   "TERN_CUDA_TC_PREFILL off)";
      return false;
    }
    const bool ok = resolve(lib, "cublasLtCreate", api.create) && resolve(lib, "cublasLtDestroy", api.destroy) &&
                    resolve(lib, "cublasLtGetStatusString", api.status_string) &&
                    resolve(lib, "cublasLtMatmulDescCreate", api.desc_create) &&
                    resolve(lib, "cublasLtMatmulDescDestroy", api.desc_destroy) &&
                    resolve(lib, "cublasLtMatmulDescSetAttribute", api.desc_set) &&
                    resolve(lib, "cublasLtMatrixLayoutCreate", api.layout_create) &&
                    resolve(lib, "cublasLtMatrixLayoutDestroy", api.layout_destroy) &&
                    resolve(lib, "cublasLtMatmulPreferenceCreate", api.pref_create) &&
                    resolve(lib, "cublasLtMatmulPreferenceDestroy", api.pref_destroy) &&
                    resolve(lib, "cublasLtMatmulPreferenceSetAttribute", api.pref_set) &&
                    resolve(lib, "cublasLtMatmulAlgoGetHeuristic", api.heuristic) &&
                    resolve(lib, "cublasLtMatmul", api.matmul);
    if (!ok) load_error = "cuda: the cuBLASLt library that was found lacks an expected entry point";
    return ok;
  }();
  if (!loaded) {
    error = load_error;
    return nullptr;
  }
  return &api;
}

// A failing cuBLASLt call after a successful start is a bug (shapes are validated before they
// get here) or a dead device: abort like TERN_CUDA_CHECK.
void check_lt(const CublasLtApi* api, cublasStatus_t st, const char* what) {
  TERN_CHECK_MSG(st == CUBLAS_STATUS_SUCCESS,
                 (std::string("cuBLASLt: ") + what + " failed: " + api->status_string(st)).c_str());
}

}  // namespace

uint32_t pointer_alignment(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && addr % align != 0) align /= 2;
  return align;
}

struct TcGemm::Plan {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

Result<std::unique_ptr<TcGemm>> TcGemm::create() {
  std::string err;
  const CublasLtApi* api = load_api(err);
  if (api == nullptr) return error(err);
  std::unique_ptr<TcGemm> g(new TcGemm());
  g->api_ = api;
  cublasLtHandle_t handle = nullptr;
  if (const cublasStatus_t st = api->create(&handle); st != CUBLAS_STATUS_SUCCESS) {
    return error(std::string("cuda: cuBLASLt did not start: ") + api->status_string(st));
  }
  g->handle_ = handle;
  cublasLtMatmulDesc_t desc = nullptr;
  check_lt(api, api->desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  g->matmul_desc_ = desc;
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  check_lt(api, api->desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)), "set TRANSA");
  check_lt(api, api->desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)), "set TRANSB");
  if (cudaMalloc(&g->workspace_, kWorkspaceBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return error("cuda: cannot allocate the " + std::to_string(kWorkspaceBytes >> 20) +
                 " MiB cuBLASLt workspace of the tensor-core prefill");
  }
  g->workspace_bytes_ = kWorkspaceBytes;
  return g;
}

TcGemm::~TcGemm() {
  // Teardown errors are not actionable; the backend synchronized its stream before this.
  for (auto& [shape, plan] : plans_) {
    api_->layout_destroy(plan->a);
    api_->layout_destroy(plan->b);
    api_->layout_destroy(plan->d);
  }
  if (matmul_desc_ != nullptr) api_->desc_destroy(static_cast<cublasLtMatmulDesc_t>(matmul_desc_));
  if (handle_ != nullptr) api_->destroy(static_cast<cublasLtHandle_t>(handle_));
  cudaFree(workspace_);
}

const TcGemm::Plan& TcGemm::plan_for(const TcGemmShape& s) {
  auto it = plans_.find(s);
  if (it != plans_.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  const CublasLtApi* api = api_;
  check_lt(api, api->layout_create(&plan->a, CUDA_R_16BF, s.k, s.m, s.lda), "layout A");
  check_lt(api, api->layout_create(&plan->b, CUDA_R_16BF, s.k, s.n, s.ldb), "layout B");
  check_lt(api, api->layout_create(&plan->d, CUDA_R_32F, s.m, s.n, s.ldd), "layout D");
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(api, api->pref_create(&pref), "cublasLtMatmulPreferenceCreate");
  check_lt(api, api->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(size_t)),
           "set workspace");
  // C is D (beta = 0 never reads it, but the kernel is chosen for its alignment too).
  const uint32_t aligns[4] = {s.align_a, s.align_b, s.align_d, s.align_d};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) check_lt(api, api->pref_set(pref, which[i], &aligns[i], sizeof(uint32_t)), "set alignment");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = api->heuristic(static_cast<cublasLtHandle_t>(handle_),
                                           static_cast<cublasLtMatmulDesc_t>(matmul_desc_), plan->a, plan->b,
                                           plan->d, plan->d, pref, 1, &result, &found);
  api->pref_destroy(pref);
  check_lt(api, st, "cublasLtMatmulAlgoGetHeuristic");
  TERN_CHECK_MSG(found > 0, "cuBLASLt offers no bf16 GEMM for this shape");
  plan->algo = result.algo;
  return *plans_.emplace(s, std::move(plan)).first->second;
}

void TcGemm::prepare(const TcGemmShape& s) { (void)plan_for(s); }

void TcGemm::run(const TcGemmShape& s, const void* a, const void* b, float* d, cudaStream_t stream) {
  const Plan& p = plan_for(s);
  const float alpha = 1.0f, beta = 0.0f;
  check_lt(api_,
           api_->matmul(static_cast<cublasLtHandle_t>(handle_), static_cast<cublasLtMatmulDesc_t>(matmul_desc_),
                        &alpha, a, p.a, b, p.b, &beta, d, p.d, d, p.d, &p.algo, workspace_, workspace_bytes_, stream),
           "cublasLtMatmul");
}

}  // namespace tern::cuda

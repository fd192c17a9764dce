// The --backend option of the commands that run a model: which Backend to construct.
// "cpu" is always there; "cuda" when tern was built with the CUDA backend (TERN_CUDA).
// With it, --act-bits: the precision of the activations that meet quantized weights, on either
// backend (16, the default: within ~2^-15 of float, the two backends' greedy tokens agree; 8:
// llama.cpp's precision, faster where the kernels are bound by instructions).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "ops/backend.h"

namespace tern::cli {

// The backend named `name` ("cpu" or "cuda"). n_threads: CPU worker threads (ignored by CUDA;
// must be > 0). Error naming the choices when `name` is unknown, or when CUDA was built in but
// has no usable device.
// act_bits: 8 or 16 (TERN_CPU_ACT_BITS / TERN_CUDA_ACT_BITS override it).
Result<std::unique_ptr<Backend>> make_backend(std::string_view name, int n_threads, int act_bits = 16);

// Adds --backend (checked against backend_names()) and --act-bits (8 or 16) to a command.
void add_backend_flags(CLI::App& cmd, std::string& backend, int& act_bits);

// Names make_backend accepts in this build, for --help and validation.
std::vector<std::string_view> backend_names();

}  // namespace tern::cli

// The impossible-value check of weights (model/param_check.h) on the paths that load weights from a
// file: a model directory (xtrain_generate --model, xtrain_mpi --init-from) and an export. A NaN
// is refused with one line naming the tensor, instead of ending in the sampler's internal check.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include <xtrain/backend/registry.h>
#include <xtrain/core/error.h>
#include "core/io.h"
#include "error_test_util.h"
#include "fixtures.h"
#include "model/param_check.h"
#include <xtrain/serve/export.h>

using namespace xtrain;
using test::error_of;

namespace {

GPTConfig small_config() { return test::model_config(70, 8, 16, 2, 2, 2, 8, 64); }

std::vector<float> params_of(const GPTConfig& c) {
  const std::vector<ParamTensor> pl = param_layout(c);
  std::vector<float> p(pl.back().offset + pl.back().count);
  for (size_t i = 0; i < p.size(); ++i) p[i] = 0.01f * float(i % 97);
  for (size_t i = size_t(c.V) * c.C; i < size_t(c.Vp()) * c.C; ++i) p[i] = 0;  // wte's padding rows
  return p;
}
}  // namespace

TEST_CASE("non_finite_param names the first tensor and element that is not finite") {
  const GPTConfig c = small_config();
  std::vector<float> p = params_of(c);
  CHECK(non_finite_param(c, p).empty());
  const ParamTensor t = param_layout(c)[5];
  p[t.offset + 3] = std::numeric_limits<float>::infinity();
  CHECK(non_finite_param(c, p) == "tensor " + t.name + " element 3 is inf");
}

TEST_CASE("a model directory with a NaN weight is refused on load; an export of one is refused") {
  const GPTConfig c = small_config();
  std::vector<float> p = params_of(c);
  const ParamTensor t = param_layout(c)[4];
  p[t.offset + 1] = std::nanf("");
  std::string tmpl = (std::filesystem::temp_directory_path() / "xtrain_finite_XXXXXX").string();
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  const std::filesystem::path dir = tmpl;
  std::vector<std::vector<float>> storage;
  write_file_atomic((dir / kConfigFile).string(), model_config_json(c, ModelLayout::Xtrain));
  write_file_atomic((dir / kModelFile).string(),
                    safetensors_bytes(export_tensors(c, p, ModelLayout::Xtrain, storage), {{"format", "pt"}}));
  const std::string e = error_of([&] { load_model_dir(dir.string()); });
  CHECK(e.find("model.safetensors: tensor " + t.name + " element 1 is nan (weights must be finite)") != std::string::npos);
  // uploaded into a backend's memory (xtrain_generate on CUDA; here the CPU backend): found by its sum, named alike
  BackendOptions bo;
  bo.device = Device::cpu;
  const std::unique_ptr<Backend> be = make_backend(bo);
  GPT model(c, *be, 0, /*with_grads=*/false);
  const std::string on_device = error_of([&] { load_model_dir(dir.string(), [&](const GPTConfig&) { return model.params(); }, *be); });
  CHECK(on_device.find("model.safetensors: tensor " + t.name + " element 1 is nan (weights must be finite)") != std::string::npos);
  // the export refuses before it reads the tokenizer files (none exist here)
  CHECK(error_of([&] { make_export(c, p, ModelLayout::Xtrain, "absent.json", "absent.bpe"); }) ==
        "the weights are not finite: tensor " + t.name + " element 1 is nan; not exporting");
  std::filesystem::remove_all(dir);
}

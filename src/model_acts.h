// Internal indices of GPT parameter tensors and activation buffers (shared by model.cpp and
// model_step.cpp). Per layer the parameter tensors follow param_layout's order.
#pragma once

namespace xtrain {

// parameter tensors: 0 wte, 1 wpe, then kPerLayer per layer, then lnf.w, lnf.b
constexpr int kLayerBase = 2;
constexpr int kPerLayer = 12;
enum LayerParam { kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB };

// activations: kPerLayerActs per layer, then the global ones (offset L * kPerLayerActs)
enum LayerAct {
  kLn1, kLn1Mean, kLn1Rstd, kQkv, kAtty, kAtt, kAttProj, kRes2, kLn2, kLn2Mean, kLn2Rstd, kFch, kFchGelu,
  kFcProj, kRes3, kPerLayerActs
};
enum GlobalAct {
  kEncoded, kLnf, kLnfMean, kLnfRstd, kLogits, kLosses,
  kDRes, kDTmpC, kDTmpC2, kDQkv, kDAtty, kDFch, kDFchGelu, kNumGlobalActs
};

// is_fp32_act: buffers that are fp32 whatever the activation type (layernorm statistics, the
// attention scratch, per-position losses); all others hold activations or their gradients in the
// backend's activation type (Backend::activation_bytes()).
constexpr bool is_fp32_layer_act(int which) {
  return which == kLn1Mean || which == kLn1Rstd || which == kAtt || which == kLn2Mean || which == kLn2Rstd;
}
constexpr bool is_fp32_global_act(int which) { return which == kLnfMean || which == kLnfRstd || which == kLosses; }

}  // namespace xtrain

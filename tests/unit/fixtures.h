// The unit tests' model configurations (GPTConfig, <xtrain/model/model.h>), built in one place: a test
// names the model it means (tiny_gpt2(), tiny_llama(), gpt2_124m()) or gives its own sizes to
// model_config, instead of setting eight fields by hand. The sizes here are what tests' figures depend
// on (finite differences, hand-counted parameters, stored values): change them only with those tests.
// Public headers only, so every test may include it.
#pragma once

#include <xtrain/model/model.h>

namespace xtrain::test {

// model_config: a GPT-2 family configuration of these sizes, in GPTConfig's (and describe()'s) order:
// vocabulary V, context maxT, width C, layers L, query heads NH, key/value heads KVH, head size HS, MLP
// width F; every other field at its default.
inline GPTConfig model_config(int V, int maxT, int C, int L, int NH, int KVH, int HS, int F) {
  GPTConfig c;
  c.V = V, c.maxT = maxT, c.C = C, c.L = L, c.NH = NH, c.KVH = KVH, c.HS = HS, c.F = F;
  return c;
}

// tiny_gpt2: V 32, T 8, C 16, 4 query heads on 2 key/value heads (grouped-query) of size 4, F 24, and L
// layers (2; 3 where a test needs layers between the first and the last): every op of the model, small
// enough for finite differences in double precision.
inline GPTConfig tiny_gpt2(int L = 2) { return model_config(32, 8, 16, L, 4, 2, 4, 24); }

// tiny_llama: tiny_gpt2's sizes in the llama family, with its own head (tie 0, as Llama models have) or
// the head tied to wte (tie 1).
inline GPTConfig tiny_llama(int tie = 0, int L = 2) {
  GPTConfig c = tiny_gpt2(L);
  c.arch = Arch::llama, c.tie_embeddings = tie;
  return c;
}

// gpt2_124m: GPT-2 small (Radford et al. 2019; llm.c's gpt2_124M): the published model, for figures that
// are known for it (parameter count, FLOPs per token).
inline GPTConfig gpt2_124m() { return model_config(50257, 1024, 768, 12, 12, 12, 64, 3072); }

}  // namespace xtrain::test

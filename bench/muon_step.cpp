// muon_step: xtrain's Muon (train/optim.h: the parts of the fused matrices, the shape groups, the batched
// Newton-Schulz of the backend) applied to given parameters and gradients, for bench/muon_check.py, which
// feeds the same tensors to torch.optim.Muon and compares. Not a test; needs no data or tokenizer.
//   muon_step --layout [model options]: prints {"num_params": n, "matrices": [[offset, rows, cols], ...]}
//   muon_step --in FILE --out FILE --steps K [model and Muon options]: FILE holds n float32 parameters
//   then K x n float32 gradients (native byte order); OUT gets the n parameters after K Muon steps at
//   --lr (no schedule, no clipping). Only Muon's matrices change (AdamW is not run).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include <xtrain/backend/registry.h>
#include <xtrain/core/error.h>
#include <xtrain/model/model.h>
#include <xtrain/train/optim.h>
#include "comm/thread_world.h"

namespace po = boost::program_options;
using namespace xtrain;

int main(int argc, char** argv) {
  GPTConfig c;
  std::string arch = "gpt2", device = "cpu", adjust = "original", in, out;
  MuonConfig mc;
  int steps = 1;
  bool layout = false;
  po::options_description o("muon_step options");
  o.add_options()("help", "this text")("layout", po::bool_switch(&layout), "print the Muon matrices and exit")(
      "device", po::value(&device)->default_value("cpu"), "cpu | cuda")(
      "arch", po::value(&arch)->default_value("gpt2"), "gpt2 | llama")("vocab", po::value(&c.V)->default_value(512), "V")(
      "seq", po::value(&c.maxT)->default_value(64), "maxT")("dim", po::value(&c.C)->default_value(128), "C")(
      "heads", po::value(&c.NH)->default_value(4), "NH")("kv-heads", po::value(&c.KVH)->default_value(4), "KVH")(
      "layers", po::value(&c.L)->default_value(2), "L")("ffn", po::value(&c.F)->default_value(512), "F")(
      "lr", po::value(&mc.lr)->default_value(0.02f), "Muon's lr")(
      "momentum", po::value(&mc.momentum)->default_value(0.95f), "momentum")(
      "weight-decay", po::value(&mc.weight_decay)->default_value(0.1f), "decoupled weight decay")(
      "ns-steps", po::value(&mc.ns_steps)->default_value(5), "Newton-Schulz steps")(
      "adjust", po::value(&adjust)->default_value("original"), "original | match_rms_adamw")(
      "steps", po::value(&steps)->default_value(1), "Muon steps")("in", po::value(&in), "input file")(
      "out", po::value(&out), "output file");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, o), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << o;
      return 0;
    }
    c.arch = parse_arch(arch);
    c.HS = c.C / c.NH;
    c.tie_embeddings = c.llama() ? 0 : 1;
    c.validate();
    mc.adjust = parse_muon_adjust(adjust);
    BackendOptions bo;
    bo.device = parse_device(device);
    bo.dtype = bo.device == Device::cuda ? DType::bf16 : DType::fp32;
    auto be = make_backend(bo);
    GPT model(c, *be);
    const size_t n = model.num_params();
    if (layout) {
      std::printf("{\"num_params\": %zu, \"matrices\": [", n);
      const std::vector<MuonMatrix> m = muon_matrices(model);
      for (size_t i = 0; i < m.size(); ++i) std::printf("%s[%zu, %d, %d]", i ? ", " : "", m[i].offset, m[i].rows, m[i].cols);
      std::printf("]}\n");
      return 0;
    }
    std::ifstream f(in, std::ios::binary);
    std::vector<float> host(n);
    auto read = [&] {
      f.read(reinterpret_cast<char*>(host.data()), std::streamsize(n * sizeof(float)));
      XT_CHECK(f.good(), "muon_step: " << in << " is shorter than " << n << " x (1 + " << steps << ") floats");
    };
    read();
    be->copy_to_device(model.params(), host.data(), n * sizeof(float));
    ThreadWorld world(1);
    const auto comm = make_thread_communicator(world, 0, std::numeric_limits<double>::infinity());
    Muon muon(*be, *comm, model, mc);
    for (int k = 0; k < steps; ++k) {
      read();
      be->copy_to_device(model.grads(), host.data(), n * sizeof(float));
      muon.step(model, mc.lr, 1.0f);
    }
    be->copy_to_host(host.data(), model.params(), n * sizeof(float));
    std::ofstream(out, std::ios::binary).write(reinterpret_cast<const char*>(host.data()), std::streamsize(n * sizeof(float)));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "muon_step: %s\n", e.what());
    return 1;
  }
}

// Stop signals (see src/core/stop_signal.h).
#include "core/stop_signal.h"

#include <csignal>
#include <initializer_list>

namespace xtrain {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal == 0) g_stop_signal = sig;  // async-signal-safe: one store, nothing else
}
}  // namespace

void install_stop_signals() {
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
}

int stop_signal_received() { return g_stop_signal; }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

}  // namespace xtrain

// Stop signals (see src/core/stop_signal.h).
#include <xtrain/core/stop_signal.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <initializer_list>

namespace xtrain {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;

// The notice: a line prepared by the training loop, written by the handler. The loop fills the buffer
// not published, then publishes it with one store; the handler reads only the published one.
constexpr size_t kNoticeBytes = 1200;
struct Notice {
  char prefix[64];
  char text[kNoticeBytes];
};
Notice g_notices[2];
volatile std::sig_atomic_t g_notice = -1;  // the published buffer, -1 none

void write_all(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDOUT_FILENO, s, n);
    if (w <= 0) return;  // nothing more to do from a handler
    s += w, n -= static_cast<size_t>(w);
  }
}

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) return;
  g_stop_signal = sig;
  const int i = g_notice;
  if (i < 0) return;
  const int saved_errno = errno;  // write may change it under the interrupted code
  const char* name = signal_name(sig);
  write_all(g_notices[i].prefix, std::strlen(g_notices[i].prefix));
  write_all(name, std::strlen(name));
  write_all(g_notices[i].text, std::strlen(g_notices[i].text));
  write_all("\n", 1);
  errno = saved_errno;
}

void copy_cut(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(s.size(), cap - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}
}  // namespace

void install_stop_signals(bool sigcont_stops) {
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
  if (sigcont_stops) sigaction(SIGCONT, &sa, nullptr);
}

int stop_signal_received() { return g_stop_signal; }

void set_stop_notice(const std::string& prefix, const std::string& text) {
  if (prefix.empty() && text.empty()) {
    g_notice = -1;
    return;
  }
  const int next = g_notice == 0 ? 1 : 0;
  copy_cut(g_notices[next].prefix, sizeof g_notices[next].prefix, prefix);
  copy_cut(g_notices[next].text, sizeof g_notices[next].text, text);
  g_notice = next;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGCONT: return "mpirun ending the job (Ctrl-C or SIGTERM to mpirun)";  // install_stop_signals
    default: return "a signal";
  }
}

const char* stop_exit_words(int sig) {
  static_assert(kExitStopped == 3, "stop_exit_words spells the exit code");
  return sig == SIGCONT ? "the ranks exit 3; the shell sees mpirun's own status, 1 after Ctrl-C or SIGTERM to mpirun)"
                        : "exit 3)";
}

}  // namespace xtrain

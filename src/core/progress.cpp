// Progress lines for long start-up work. See progress.h.
#include <xtrain/core/progress.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include <xtrain/core/error.h>
#include <xtrain/core/log.h>

namespace xtrain {

namespace {

std::string fixed1(double x) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << x;
  return os.str();
}

}  // namespace

std::string minutes_seconds(double seconds) {
  const long t = std::lround(std::max(0.0, seconds));
  std::ostringstream os;
  os << t / 60 << "m" << (t % 60 < 10 ? "0" : "") << t % 60 << "s";
  return os.str();
}

ProgressOptions long_work_options() {
  ProgressOptions o;
  o.min_total_bytes = kLongWorkBytes;
  return o;
}

bool stream_is_terminal(std::FILE* out) {
  // OMPI_COMM_WORLD_SIZE: set by Open MPI in every process that mpirun starts (Open MPI docs, mpirun(1)).
  return isatty(fileno(out)) == 1 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr;
}

Progress::Progress(std::string what, uint64_t total_bytes, int rank, ProgressOptions opt)
    : what_(std::move(what)), total_(total_bytes), print_(rank == 0 && total_bytes >= opt.min_total_bytes),
      opt_(std::move(opt)) {
  if (!opt_.out) opt_.out = log_stream();
  XT_CHECK(opt_.interval_s >= 0, "interval " << opt_.interval_s << " s must not be negative");
  terminal_ = opt_.terminal < 0 ? stream_is_terminal(opt_.out) : opt_.terminal == 1;
  start_s_ = last_s_ = now();
}

Progress::~Progress() {
  if (terminal_ && last_len_ > 0) {
    std::fputc('\n', opt_.out);
    std::fflush(opt_.out);
  }
}

double Progress::now() const {
  if (opt_.clock) return opt_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Progress::update(uint64_t done) {
  XT_CHECK(done >= done_ && done <= total_,
           what_ << ": progress " << done << " bytes after " << done_ << ", of " << total_);
  done_ = done;
  if (!print_ || finished_) return;
  const double t = now();
  if (t - last_s_ < opt_.interval_s) return;
  last_s_ = t;
  const double elapsed = t - start_s_;
  const double rate = elapsed > 0 ? done_ / elapsed : 0;  // bytes per second since the start
  std::ostringstream line;
  line << what_ << " | " << fixed1(done_ / 1e6) << " / " << fixed1(total_ / 1e6) << " MB ("
       << (total_ > 0 ? 100 * done_ / total_ : 100) << "%) | " << fixed1(rate / 1e6) << " MB/s | eta "
       << (rate > 0 ? minutes_seconds((total_ - done_) / rate) : std::string("--"));
  emit(line.str(), false);
}

void Progress::finish() {
  if (finished_) return;
  done_ = total_;
  finished_ = true;
  if (!print_) return;
  const double elapsed = now() - start_s_;
  std::ostringstream line;
  line << what_ << " | " << fixed1(total_ / 1e6) << " MB in " << fixed1(elapsed) << " s";
  if (elapsed > 0) line << " | " << fixed1(total_ / elapsed / 1e6) << " MB/s";
  emit(line.str(), true);
}

void Progress::emit(const std::string& line, bool final) {
  if (terminal_) {
    // Rewrite the line in place; blank what a longer previous line left behind.
    const std::string pad(last_len_ > line.size() ? last_len_ - line.size() : 0, ' ');
    std::fprintf(opt_.out, "\r%s%s%s", line.c_str(), pad.c_str(), final ? "\n" : "");
    last_len_ = final ? 0 : line.size();
  } else {
    std::fprintf(opt_.out, "%s\n", line.c_str());
  }
  std::fflush(opt_.out);
}

}  // namespace xtrain

// Stop signals: SIGTERM (scancel, Slurm's time limit, a container stop), SIGINT (Ctrl-C) and SIGUSR1
// (the warning sbatch --signal sends before the time limit) ask the training run to stop after the
// current step instead of killing it. The handler only records the signal (and, on rank 0, writes one
// prepared line); the training loop adds the flag to the step's existing loss all-reduce, so every
// rank stops after the same step, rank 0 writes --ckpt, and the job exits with kExitStopped. Before
// training starts a stop signal ends the job at the next start-up meeting of the ranks, also with
// kExitStopped (docs/usage.md, "Signals and exit codes").
#pragma once

#include <string>

namespace xtrain {

// kExitStopped: the exit code of a run stopped by a signal (after a completed step, with --ckpt its
// checkpoint is written and can be resumed; before training or without --ckpt nothing is saved).
constexpr int kExitStopped = 3;

// install_stop_signals: SIGTERM, SIGINT and SIGUSR1 set the flag read by stop_signal_received
// (SA_RESTART, so interrupted system calls resume); with sigcont_stops, SIGCONT too. Open MPI's mpirun
// ends a job on Ctrl-C or SIGTERM by sending each rank SIGCONT at once, SIGTERM after
// odls_base_sigkill_timeout (1 s) and SIGKILL after as long again: taking its SIGCONT as the stop
// doubles the time left to finish the step and write the checkpoint. Process-wide; the programs call
// it first thing, so no start-up phase dies by the signal.
void install_stop_signals(bool sigcont_stops = false);

// stop_signal_received: the first stop signal received since install_stop_signals, or 0.
int stop_signal_received();

// set_stop_notice: the text the handler writes to stdout, as "<prefix><signal name><text>\n", when the
// first stop signal arrives ("" = nothing: the ranks other than 0). Async-signal-safe for the handler:
// two buffers, the one published is never written. Text past ~1 KB is cut.
void set_stop_notice(const std::string& prefix, const std::string& text);

// signal_name: "SIGTERM", "SIGINT", "SIGUSR1", for SIGCONT "mpirun ending the job (Ctrl-C or SIGTERM to
// mpirun)", else "a signal".
const char* signal_name(int sig);

// stop_exit_words: how a stopped run's line ends, after "(": "exit 3)", and for mpirun ending the job
// (SIGCONT) also that mpirun's own exit status is what the shell sees (Open MPI's mpirun exits 1 after
// Ctrl-C or SIGTERM, whatever the ranks return).
const char* stop_exit_words(int sig);

}  // namespace xtrain

// Stop signals: SIGTERM (scancel, Slurm's time limit, a container stop), SIGINT (Ctrl-C) and SIGUSR1
// (the warning sbatch --signal sends before the time limit) ask the training run to stop after the
// current step instead of killing it. The handler only records the signal; the training loop adds
// the flag to the step's existing loss all-reduce, so every rank stops after the same step, rank 0
// writes --ckpt, and the job exits with kExitStopped (docs/usage.md, "Signals and exit codes").
#pragma once

namespace xtrain {

// kExitStopped: the exit code of a run stopped by a signal after a completed step (with --ckpt its
// checkpoint is written and can be resumed; without, nothing is saved).
constexpr int kExitStopped = 3;

// install_stop_signals: SIGTERM, SIGINT and SIGUSR1 set the flag read by stop_signal_received
// (SA_RESTART, so interrupted system calls resume). Idempotent; process-wide. train_rank calls it
// when training starts; before that the signals keep their default action (end the process).
void install_stop_signals();

// stop_signal_received: the first stop signal received since install_stop_signals, or 0.
int stop_signal_received();

// signal_name: "SIGTERM", "SIGINT", "SIGUSR1", else "a signal".
const char* signal_name(int sig);

}  // namespace xtrain

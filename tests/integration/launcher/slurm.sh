# shellcheck shell=bash
# slurm.sh — a private Slurm (slurmctld on the bridge address, one slurmd per namespace node) for the
# launcher tests. Source after nodes.sh/common.sh; call slurm_up after nodes_up, slurm_down at exit.
# The config is written to $XT_TMP/slurm (never /etc/slurm); clients find it through SLURM_CONF.
# Config choices: the smallest Slurm configuration that runs slurmctld and slurmd on one host as root.

XT_SLURMCTLD_PORT=6917  # not Slurm's default 6817, so a system slurmctld is never reached by mistake
XT_GPUS_PER_NODE=2      # fake GPUs (a count, no device files) so sbatch --gpus-per-node is accepted

# slurm_write_conf DIR NODE...: slurm.conf + gres.conf in DIR for these nodes (CPUs=2 each).
slurm_write_conf() {
  local dir="$1" i=0 node
  shift
  cat >"$dir/slurm.conf" <<CONF
ClusterName=xtrain-test
SlurmctldHost=$(hostname -s)($XT_BRIDGE_ADDR)
SlurmctldPort=$XT_SLURMCTLD_PORT
SlurmdPort=6918
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# slurmd would reject the node when the machine's real hardware differs from the lines below
SlurmdParameters=config_overrides
MpiDefault=pmix
SchedulerParameters=batch_sched_delay=0
# sbatch --wait polls every 2 s while that is under MinJobAge/2, else its interval grows to 32 s
# (a 15 s job then returned after 42 s). Completed jobs are forgotten after 4 s: use the logs.
MinJobAge=4
# Seconds from Slurm's SIGTERM to its SIGKILL when a step ends (e.g. a task died). xtrain catches
# SIGTERM to checkpoint (stop_signal.h), so ranks left waiting on a dead peer end at this SIGKILL:
# 10 s here, Slurm's default 30 s on most clusters (docs/launch.md).
KillWait=10
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
GresTypes=gpu
# nodes share /tmp: without a TmpFS per node PMIx fails with "spmix_appdir... File exists"
TmpFS=$dir/%n/tmp
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
StateSaveLocation=$dir/ctld
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdSpoolDir=$dir/%n/spool
SlurmdPidFile=$dir/%n/slurmd.pid
SlurmdLogFile=$dir/%n/slurmd.log
CONF
  : >"$dir/gres.conf"
  for node in "$@"; do
    echo "NodeName=$node NodeAddr=$(node_addr "$i") CPUs=2 Gres=gpu:$XT_GPUS_PER_NODE State=UNKNOWN" >>"$dir/slurm.conf"
    echo "NodeName=$node Name=gpu File=/dev/null,/dev/zero" >>"$dir/gres.conf"
    mkdir -p "$dir/$node/tmp" "$dir/$node/spool"
    i=$((i + 1))
  done
  echo "PartitionName=xt Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$dir/slurm.conf"
  mkdir -p "$dir/ctld"
}

# slurm_up: start slurmctld and a slurmd in each node of XT_NODES; wait (bounded) until all are idle.
# Exports SLURM_CONF for the clients (srun, sbatch, salloc, sinfo, scontrol).
slurm_up() {
  XT_SLURM="$XT_TMP/slurm"
  mkdir -p "$XT_SLURM"
  slurm_write_conf "$XT_SLURM" "${XT_NODES[@]}"
  export SLURM_CONF="$XT_SLURM/slurm.conf"
  on_exit slurm_down
  # 9>&-: daemons must not inherit the launcher lock
  slurmctld -f "$SLURM_CONF" -c 9>&- || { cat "$XT_SLURM/slurmctld.log"; fail "slurmctld did not start"; }
  local node t0=$SECONDS states
  for node in "${XT_NODES[@]}"; do
    node_exec "$node" slurmd -f "$SLURM_CONF" -N "$node" 9>&- ||
      { cat "$XT_SLURM/$node/slurmd.log"; fail "slurmd on $node did not start"; }
  done
  while ((SECONDS - t0 < 30)); do
    states="$(sinfo -h -N -o '%t' 2>/dev/null | sort -u | tr '\n' ' ')"
    [[ "$states" == "idle " ]] && { say "slurm up: ${XT_NODES[*]} idle after $((SECONDS - t0)) s"; return 0; }
    sleep 0.2
  done
  sinfo -N -l
  tail -n 20 "$XT_SLURM/slurmctld.log" "$XT_SLURM"/*/slurmd.log
  fail "slurm nodes not idle after 30 s (states: $states)"
}

# slurm_daemon_pids: pids from the pid files of slurmctld and the slurmds.
slurm_daemon_pids() { cat "$XT_SLURM"/slurmctld.pid "$XT_SLURM"/*/slurmd.pid 2>/dev/null; }

# slurm_down: scontrol shutdown, wait up to 10 s for the daemons to go (zombies count as gone),
# then SIGKILL what is left, by pid.
slurm_down() {
  local pids pid t0=$SECONDS left
  [[ -n "${XT_SLURM:-}" && -f "${SLURM_CONF:-}" ]] || return 0
  pids="$(slurm_daemon_pids)"
  scontrol shutdown >/dev/null 2>&1
  while ((SECONDS - t0 < 10)); do
    left=""
    for pid in $pids; do pid_alive "$pid" && left+=" $pid"; done
    [[ -z "$left" ]] && break
    sleep 0.2
  done
  for pid in $left; do
    say "slurm daemon $pid still alive after scontrol shutdown: SIGKILL"
    kill -9 "$pid" 2>/dev/null
  done
  XT_SLURM=""
}

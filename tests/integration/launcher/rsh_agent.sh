#!/usr/bin/env bash
# rsh_agent.sh — stands in for ssh when mpirun starts its daemons on namespace "nodes" (nodes.sh):
#   mpirun --mca plm_rsh_agent tests/integration/launcher/rsh_agent.sh --hostfile H ...
# Called like ssh: [ssh options] HOST COMMAND...; runs COMMAND (a shell string, as ssh would) inside
# HOST's network namespace with HOST as hostname.
set -u
while (($#)); do
  case "$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;  # ssh options that take an argument
    -*) shift ;;                          # flags such as -x, -T, -q
    *) break ;;
  esac
done
host="${1:?rsh_agent.sh: no host given}"
shift
[[ -e "/run/netns/$host" ]] || { echo "rsh_agent.sh: no namespace node '$host'" >&2; exit 255; }
exec nsenter --net="/run/netns/$host" unshare --uts sh -c "hostname $host && $*"

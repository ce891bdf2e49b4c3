# shellcheck shell=bash
# Two hosts made on this machine, for multi-host jobs without a cluster (sourced by
# tests/launcher/multihost_test.sh and benchmarks/run_scaling.sh): two network namespaces joined
# by a veth pair (10.77.0.1 and 10.77.0.2), each with its own UTS namespace and host name. mpirun
# runs inside host a and starts host b's daemon without ssh: Open MPI's plm_rsh_agent is a script
# that runs "AGENT HOST COMMAND..." inside HOST's namespaces (nsenter). TCP is confined to the
# veth. The hosts share this file system, as a cluster's hosts share a network file system.
#
# Needs root, ip, unshare, nsenter (make_hosts fails naming what is missing). Everything carries
# the sourcing shell's pid in its name; `trap cleanup EXIT` removes it, and make_hosts removes
# what a user killed with SIGKILL left. After sourcing: make_hosts, write_agent, then
# host_mpirun HOSTFILE NP COMMAND... ($work/two_hosts: 2 slots per host; $work/one_host: 4 slots
# on host a), in_host H COMMAND..., and ${hostname[a]}, ${ip[b]}, ${ns[b]}, $work.
# fail comes from tests/testing/shell_helpers.sh (source it first).
id=$$
work=$(mktemp -d "${TMPDIR:-/tmp}/momoe_multihost.$id.XXXXXX")
declare -A ns=([a]="momoe-mh$id-a" [b]="momoe-mh$id-b")
declare -A hostname=([a]="momoe-a-$id" [b]="momoe-b-$id")
declare -A ip=([a]=10.77.0.1 [b]=10.77.0.2)
uts() { echo "$work/uts-$1"; }

# Removes every process left in the namespaces, the namespaces (the veth pair goes with them),
# the UTS namespaces' bind mounts and the scratch directory.
cleanup() {
  local h pids
  mapfile -t pids < <(jobs -p)
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2> /dev/null
  for h in a b; do
    if [ -e "/run/netns/${ns[$h]}" ]; then
      mapfile -t pids < <(ip netns pids "${ns[$h]}" 2> /dev/null)
      [ ${#pids[@]} -eq 0 ] || kill -9 "${pids[@]}" 2> /dev/null
      ip netns delete "${ns[$h]}" 2> /dev/null
    fi
    mountpoint -q "$(uts "$h")" 2> /dev/null && umount "$(uts "$h")"
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP  # through the EXIT trap

# host_owner_runs PID: PID (the shell that made a set of hosts) still runs (not a zombie).
host_owner_runs() {
  local stat
  stat=$(cat "/proc/$1/stat" 2> /dev/null) || return 1
  stat=${stat##*) }  # the fields after "(comm) ": the state first
  [ "${stat%% *}" != Z ]
}

# Removes what an earlier user killed with SIGKILL (its EXIT trap never ran) left behind: the
# namespaces, veth and UTS mounts named after a pid that no longer runs.
remove_stale_hosts() {
  local name pid target pids
  for name in $(ip netns list 2> /dev/null | grep -oE '^momoe-mh[0-9]+-[ab]'); do
    pid=${name#momoe-mh}
    pid=${pid%-*}
    host_owner_runs "$pid" && continue
    mapfile -t pids < <(ip netns pids "$name" 2> /dev/null)
    [ ${#pids[@]} -eq 0 ] || kill -9 "${pids[@]}" 2> /dev/null
    ip netns delete "$name" 2> /dev/null
    ip link delete "mh${pid}a" 2> /dev/null
  done
  for target in $(findmnt -rn -o TARGET | grep -E '/momoe_multihost\.[0-9]+\.[^/]*/uts-[ab]$'); do
    pid=${target##*/momoe_multihost.}
    pid=${pid%%.*}
    host_owner_runs "$pid" || { umount "$target" && rm -rf "${target%/*}" 2> /dev/null; }
  done
}

# in_host H COMMAND...: COMMAND inside host H's network and UTS namespaces.
in_host() {
  local h=$1
  shift
  nsenter --net="/run/netns/${ns[$h]}" --uts="$(uts "$h")" -- "$@"
}

# The two hosts, or a failure naming why they cannot be made.
make_hosts() {
  local tool h veth
  [ "$(id -u)" -eq 0 ] ||
    fail "creating network and UTS namespaces needs root (this runs as uid $(id -u)); CI runs as root"
  for tool in ip unshare nsenter mountpoint findmnt; do
    command -v "$tool" > /dev/null ||
      fail "$tool not found: the two hosts cannot be made (Debian: apt-get install iproute2 util-linux)"
  done
  remove_stale_hosts
  for h in a b; do
    ip netns add "${ns[$h]}" 2> "$work/err" ||
      fail "cannot create network namespace ${ns[$h]}: $(cat "$work/err")"
    touch "$(uts "$h")"
    unshare --uts="$(uts "$h")" hostname "${hostname[$h]}" 2> "$work/err" ||
      fail "cannot create a UTS namespace for host $h: $(cat "$work/err")"
  done
  ip link add "mh${id}a" type veth peer name "mh${id}b" 2> "$work/err" ||
    fail "cannot create the veth pair mh${id}a-mh${id}b: $(cat "$work/err")"
  for h in a b; do
    veth=mh$id$h
    ip link set "$veth" netns "${ns[$h]}" &&
      ip -n "${ns[$h]}" addr add "${ip[$h]}/24" dev "$veth" &&
      ip -n "${ns[$h]}" link set "$veth" up && ip -n "${ns[$h]}" link set lo up ||
      fail "cannot configure $veth in ${ns[$h]}"
    [ "$(in_host "$h" hostname)" = "${hostname[$h]}" ] || fail "host $h does not have its host name"
  done
}

# Open MPI's rsh agent: "AGENT HOST COMMAND..." runs the command line (as ssh would, through a
# shell) inside HOST's namespaces.
write_agent() {
  cat > "$work/agent.sh" << EOF
#!/bin/sh
host=\$1
shift
case \$host in
  ${ip[a]}) net=/run/netns/${ns[a]} uts=$(uts a) ;;
  ${ip[b]}) net=/run/netns/${ns[b]} uts=$(uts b) ;;
  *) echo "agent.sh: unknown host \$host" >&2; exit 255 ;;
esac
exec nsenter --net="\$net" --uts="\$uts" -- /bin/sh -c "\$*"
EOF
  chmod +x "$work/agent.sh"
  printf '%s slots=2\n%s slots=2\n' "${ip[a]}" "${ip[b]}" > "$work/two_hosts"
  printf '%s slots=4\n' "${ip[a]}" > "$work/one_host"
}

# host_mpirun HOSTFILE NP COMMAND...: mpirun from host a over HOSTFILE's hosts, TCP on the veth
# only, NP ranks; bounded by $host_mpirun_timeout seconds when set (exit 124).
host_mpirun() {
  local hosts=$1 np=$2
  shift 2
  in_host a timeout "${host_mpirun_timeout:-0}" mpirun -np "$np" --hostfile "$hosts" --oversubscribe \
    --mca plm_rsh_agent "$work/agent.sh" --mca oob_tcp_if_include 10.77.0.0/24 \
    --mca pml ob1 --mca btl tcp,vader,self --mca btl_tcp_if_include 10.77.0.0/24 \
    --mca btl_vader_single_copy_mechanism none -x OPENBLAS_NUM_THREADS "$@"
}

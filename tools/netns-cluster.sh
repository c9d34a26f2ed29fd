#!/bin/sh
# K hosts on this machine, for running weft by hand across "hosts": network namespaces on a
# bridge, each with its own address, links optionally shaped with tbf (netem is not needed).
# The same layout `weft bench stabilize --hosts K` makes for itself (src/bench/hosts/netns.rs);
# this one stays until `down`.
#
#   tools/netns-cluster.sh up K [RATE]    make hosts 0..K-1 (10.203.0.1 .. ), RATE e.g. 1gbit
#   tools/netns-cluster.sh exec I CMD...  run CMD on host I
#   tools/netns-cluster.sh addr I         host I's address
#   tools/netns-cluster.sh fail I         host I's link goes down (nothing says goodbye)
#   tools/netns-cluster.sh recover I      ... and comes back
#   tools/netns-cluster.sh cut I J        the link between I and J carries nothing, silently
#   tools/netns-cluster.sh mend I J       ... and carries again
#   tools/netns-cluster.sh down           remove every host and the bridge
#
# Example: four `weft node` processes on four hosts, found through the env bootstrap:
#   tools/netns-cluster.sh up 4 1gbit
#   for i in 0 1 2 3; do WEFT_RANK=$i WEFT_SIZE=4 WEFT_RENDEZVOUS=10.203.0.1:7000 \
#     WEFT_JOB_SECRET=s tools/netns-cluster.sh exec $i target/release/weft node \
#     --bootstrap env & done
# Needs root and iproute2.
set -eu
NAME=${WEFT_CLUSTER_NAME:-weftc}
BR=${NAME}br
DEV=weft0

ns() { echo "$NAME-h$1"; }
addr() { echo "10.203.$(($1 / 250)).$(($1 % 250 + 1))"; }
hosts() { ip netns list | cut -d' ' -f1 | grep "^$NAME-h" || true; }
remove() {
    for n in $(hosts); do ip netns del "$n"; done
    for v in $(ip -o link show | grep -o "${NAME}v[0-9]*" | sort -u); do ip link del "$v" 2>/dev/null || true; done
    ip link del "$BR" 2>/dev/null || true
}

case "${1:-}" in
up)
    k=${2:?up K [RATE]}
    rate=${3:-}
    [ "$(id -u)" = 0 ] || { echo "netns-cluster: needs root" >&2; exit 1; }
    [ -z "$(hosts)" ] || { echo "netns-cluster: $NAME exists; run down first" >&2; exit 1; }
    # A half-made cluster is no use to anyone.
    trap 'echo "netns-cluster: up failed; removing what it made" >&2; remove' EXIT
    ip link add "$BR" type bridge
    ip link set "$BR" up
    i=0
    while [ "$i" -lt "$k" ]; do
        n=$(ns "$i")
        ip netns add "$n"
        ip link add "${NAME}v$i" type veth peer name "$DEV" netns "$n"
        ip link set "${NAME}v$i" master "$BR" up
        ip -n "$n" addr add "$(addr "$i")/16" dev "$DEV"
        ip -n "$n" link set "$DEV" up
        ip -n "$n" link set lo up
        if [ -n "$rate" ]; then
            tc -n "$n" qdisc add dev "$DEV" root tbf rate "$rate" burst 256kb latency 50ms
            tc qdisc add dev "${NAME}v$i" root tbf rate "$rate" burst 256kb latency 50ms
        fi
        echo "host $i: $n $(addr "$i")"
        i=$((i + 1))
    done
    trap - EXIT
    ;;
exec)
    i=${2:?exec I CMD...}
    shift 2
    exec ip netns exec "$(ns "$i")" "$@"
    ;;
addr) addr "${2:?addr I}" ;;
fail) ip -n "$(ns "${2:?fail I}")" link set "$DEV" down ;;
recover) ip -n "$(ns "${2:?recover I}")" link set "$DEV" up ;;
cut | mend)
    op=$1
    a=${2:?$op I J}
    b=${3:?$op I J}
    [ "$a" != "$b" ] || { echo "netns-cluster: a host has no link to itself" >&2; exit 1; }
    # Each end sends the other's frames to a hardware address nobody has.
    for p in "$a $b" "$b $a"; do
        from=${p% *}
        to=${p#* }
        if [ "$op" = cut ]; then
            ip -n "$(ns "$from")" neigh replace "$(addr "$to")" \
                lladdr 02:00:00:00:00:00 dev "$DEV" nud permanent
        else
            ip -n "$(ns "$from")" neigh del "$(addr "$to")" dev "$DEV"
        fi
    done
    ;;
down) remove ;;
*)
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

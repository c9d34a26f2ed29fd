#!/bin/sh
# X*Y*Z hosts on this machine linked as BG/L's 3-D torus, for running weft by hand across a
# torus: network namespaces, each with a veth link to each of its six neighbours
# (wrap-around; an axis of 2 has one link, an axis of 1 none), forwarding on, and
# dimension-ordered static routes (x, then y, then z, the shorter way round, ties going up),
# so two hosts are as many kernel forwarding steps apart as weft's topology::torus counts
# hops. Host i sits at x = i mod X, y = (i / X) mod Y, z = i / (X*Y), the XYZ order of a
# BG/L partition. The same layout `weft bench stabilize --torus XxYxZ` makes for itself
# (src/bench/hosts/torus.rs, whose test probes every pair's hop count); this one stays until
# `down`.
#
#   tools/netns-torus.sh up X Y Z [RATE]  make hosts 0..X*Y*Z-1 (10.204.0.1 ..), links
#                                         shaped to RATE (e.g. 1gbit) on their way out
#   tools/netns-torus.sh exec I CMD...    run CMD on host I
#   tools/netns-torus.sh addr I           host I's address
#   tools/netns-torus.sh down             remove every host (and with them every link)
#
# Example: a job of 8 `weft node` processes on a 2x2x2 torus, rank i on host i:
#   tools/netns-torus.sh up 2 2 2
#   for i in 0 1 2 3 4 5 6 7; do WEFT_RANK=$i WEFT_SIZE=8 WEFT_RENDEZVOUS=10.204.0.1:7000 \
#     WEFT_JOB_SECRET=s tools/netns-torus.sh exec $i target/release/weft node \
#     --bootstrap env & done
# Needs root and iproute2.
set -eu
NAME=${WEFT_TORUS_NAME:-weftt}

ns() { echo "$NAME-h$1"; }
addr() { echo "10.204.$(($1 / 250)).$(($1 % 250 + 1))"; }
hosts() { ip netns list | cut -d' ' -f1 | grep "^$NAME-h" || true; }
remove() { for n in $(hosts); do ip netns del "$n"; done; }

# coord I AXIS: host I's coordinate along axis 0 (x), 1 (y) or 2 (z).
coord() {
    case $2 in
    0) echo $(($1 % X)) ;;
    1) echo $((($1 / X) % Y)) ;;
    *) echo $(($1 / (X * Y))) ;;
    esac
}
# extent AXIS
extent() { case $1 in 0) echo "$X" ;; 1) echo "$Y" ;; *) echo "$Z" ;; esac }
# step I AXIS UP: the host one link from I along AXIS, up (1) or down (0).
step() {
    n=$(extent "$2")
    c=$(coord "$1" "$2")
    if [ "$3" = 1 ]; then d=$(((c + 1) % n)); else d=$(((c + n - 1) % n)); fi
    case $2 in
    0) echo $(($1 - c + d)) ;;
    1) echo $(($1 + (d - c) * X)) ;;
    *) echo $(($1 + (d - c) * X * Y)) ;;
    esac
}
# dev AXIS UP: the link's name inside a host.
dev() { printf '%s%s' "$(echo xyz | cut -c$(($1 + 1)))" "$([ "$2" = 1 ] && echo p || echo m)"; }
# ports I: "AXIS UP" for each link host I has.
ports() {
    for a in 0 1 2; do
        case $(extent $a) in
        1) ;;
        2) if [ "$(coord "$1" $a)" = 0 ]; then echo "$a 1"; else echo "$a 0"; fi ;;
        *) echo "$a 0"; echo "$a 1" ;;
        esac
    done
}
# next FROM TO: "AXIS UP VIA" of the dimension-ordered route's first link.
next() {
    for a in 0 1 2; do
        cf=$(coord "$1" $a)
        ct=$(coord "$2" $a)
        [ "$cf" = "$ct" ] && continue
        n=$(extent $a)
        ahead=$(((ct + n - cf) % n))
        if [ "$n" = 2 ]; then
            up=$([ "$cf" = 0 ] && echo 1 || echo 0)
        elif [ "$ahead" -le $((n - ahead)) ]; then up=1; else up=0; fi
        echo "$a $up $(step "$1" $a $up)"
        return
    done
}

case "${1:-}" in
up)
    X=${2:?up X Y Z [RATE]}
    Y=${3:?up X Y Z [RATE]}
    Z=${4:?up X Y Z [RATE]}
    rate=${5:-}
    k=$((X * Y * Z))
    [ "$k" -ge 1 ] && [ "$k" -le 1000 ] || { echo "netns-torus: 1 to 1000 hosts" >&2; exit 1; }
    [ "$(id -u)" = 0 ] || { echo "netns-torus: needs root" >&2; exit 1; }
    [ -z "$(hosts)" ] || { echo "netns-torus: $NAME exists; run down first" >&2; exit 1; }
    # A half-made torus is no use to anyone.
    trap 'echo "netns-torus: up failed; removing what it made" >&2; remove' EXIT
    i=0
    while [ "$i" -lt "$k" ]; do ip netns add "$(ns $i)"; i=$((i + 1)); done
    i=0
    while [ "$i" -lt "$k" ]; do
        ports $i | while read -r a up; do
            [ "$up" = 1 ] || continue
            j=$(step $i "$a" 1)
            ip link add "$(dev "$a" 1)" netns "$(ns $i)" type veth \
                peer name "$(dev "$a" 0)" netns "$(ns "$j")"
        done
        i=$((i + 1))
    done
    i=0
    while [ "$i" -lt "$k" ]; do
        n=$(ns $i)
        ip netns exec "$n" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward;
            echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter;
            echo 0 > /proc/sys/net/ipv4/conf/default/rp_filter'
        {
            echo "link set lo up"
            echo "addr add $(addr $i)/32 dev lo"
            ports $i | while read -r a up; do echo "link set $(dev "$a" "$up") up"; done
            j=0
            while [ "$j" -lt "$k" ]; do
                if [ "$j" != "$i" ]; then
                    set -- $(next $i $j)
                    echo "route add $(addr $j)/32 via $(addr "$3") dev $(dev "$1" "$2") onlink"
                fi
                j=$((j + 1))
            done
        } | ip -n "$n" -batch -
        if [ -n "$rate" ]; then
            ports $i | while read -r a up; do
                tc -n "$n" qdisc add dev "$(dev "$a" "$up")" root tbf rate "$rate" \
                    burst 256kb latency 50ms
            done
        fi
        echo "host $i: $n $(addr $i) at ($(coord $i 0),$(coord $i 1),$(coord $i 2))"
        i=$((i + 1))
    done
    trap - EXIT
    ;;
exec)
    i=${2:?exec I CMD...}
    shift 2
    exec ip netns exec "$(ns "$i")" "$@"
    ;;
addr)
    addr "${2:?addr I}"
    ;;
down)
    remove
    ;;
*)
    echo "usage: $0 up X Y Z [RATE] | exec I CMD... | addr I | down" >&2
    exit 2
    ;;
esac

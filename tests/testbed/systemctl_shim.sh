#!/bin/sh
# systemctl for the k8s tier's test hosts, which have no systemd (PID 1 is no init).
#
# kubeadm drives its kubelet with `systemctl daemon-reload|start|restart|stop|status|
# is-active|is-enabled kubelet`; here the "kubelet" unit is the kubelet stand-in
# (`kubelet` on PATH: tests/testbed/kubelet_standin.py), started in a session of
# its own with its output in /tmp/kubelet-standin/kubelet.log; its pid is in
# /var/lib/kubelet/standin.pid (both private to the host). `stop` also stops the
# static-pod processes it runs (kubeadm reset would remove their containers);
# `restart` leaves them to the new instance.
#
# The HA masters' "haproxy" and "keepalived" units are Debian's daemons, run in the
# foreground in a session of their own, as their systemd units run them: haproxy in
# master-worker mode on /etc/haproxy/haproxy.cfg (`reload` checks the file, then
# SIGUSR2 makes the master load it again without dropping its listeners), keepalived
# VRRP only (the kernel has no IPVS) on /etc/keepalived/keepalived.conf, with
# pidfiles of the host's own (the default ones in /run are shared by every host).
# Their pids and output are in /tmp/systemctl-shim (private to the host).
#
# Every other unit is unknown (exit 5), as on a host without it; enable/disable/
# daemon-reload succeed and do nothing. `is-system-running` says "running": this
# systemctl does run services (install_k8s_cluster.sh asks before it starts haproxy).
set -u

PIDFILE=/var/lib/kubelet/standin.pid
LOG_DIR=/tmp/kubelet-standin

pid=""
alive() {
    # A zombie (exited, not yet reaped) is not running.
    [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* (.*) Z ' "/proc/$1/stat" 2>/dev/null
}
running() {
    pid=""
    [ -s "$PIDFILE" ] || return 1
    pid="$(cat "$PIDFILE" 2>/dev/null)"
    [ -n "$pid" ] && alive "$pid" && grep -q kubelet "/proc/$pid/cmdline" 2>/dev/null
}

start() {
    running && return 0
    mkdir -p "$LOG_DIR" /var/lib/kubelet
    rm -f "$PIDFILE"
    setsid kubelet </dev/null >>"$LOG_DIR/kubelet.log" 2>&1 &
    i=0
    while [ ! -s "$PIDFILE" ]; do # the stand-in writes it once it runs
        i=$((i + 1))
        if [ "$i" -gt 100 ]; then
            echo "kubelet did not start: see $LOG_DIR/kubelet.log" >&2
            return 1
        fi
        sleep 0.1
    done
}

# stop [SIGNAL]: TERM stops the stand-in and its static pods; HUP (restart) leaves
# the static pods running for the next stand-in to adopt.
stop() {
    if ! running; then
        rm -f "$PIDFILE"
        return 0
    fi
    kill "-${1:-TERM}" "$pid" 2>/dev/null
    i=0
    while alive "$pid"; do
        i=$((i + 1))
        if [ "$i" -gt 600 ]; then # 60 s: the static pods had 20 s each to stop
            kill -KILL "-$pid" "$pid" 2>/dev/null
            break
        fi
        sleep 0.1
    done
    rm -f "$PIDFILE"
}

# ---- haproxy and keepalived: the daemons themselves, no stand-in
SHIM_DIR=/tmp/systemctl-shim

daemon_pid() {
    pid=""
    [ -s "$SHIM_DIR/$1.pid" ] || return 1
    pid="$(cat "$SHIM_DIR/$1.pid" 2>/dev/null)"
    [ -n "$pid" ] && alive "$pid" && grep -q "$1" "/proc/$pid/cmdline" 2>/dev/null
}

daemon_start() {
    daemon_pid "$1" && return 0
    mkdir -p "$SHIM_DIR"
    case "$1" in
    haproxy)
        /usr/sbin/haproxy -c -q -f /etc/haproxy/haproxy.cfg || return 1
        # -W: master-worker, as Debian's unit (-Ws); -db: stay in the foreground.
        setsid /usr/sbin/haproxy -W -db -f /etc/haproxy/haproxy.cfg \
            </dev/null >>"$SHIM_DIR/haproxy.log" 2>&1 &
        ;;
    keepalived)
        setsid /usr/sbin/keepalived -P -n -l -D -f /etc/keepalived/keepalived.conf \
            -p "$SHIM_DIR/keepalived.pid.main" -r "$SHIM_DIR/keepalived_vrrp.pid" \
            </dev/null >>"$SHIM_DIR/keepalived.log" 2>&1 &
        ;;
    esac
    echo "$!" >"$SHIM_DIR/$1.pid"
    sleep 0.3
    if ! daemon_pid "$1"; then
        echo "$1 did not start: see $SHIM_DIR/$1.log" >&2
        tail -n 5 "$SHIM_DIR/$1.log" >&2
        return 1
    fi
}

daemon_stop() {
    if ! daemon_pid "$1"; then
        rm -f "$SHIM_DIR/$1.pid"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null
    i=0
    while alive "$pid"; do
        i=$((i + 1))
        if [ "$i" -gt 100 ]; then
            kill -KILL "$pid" 2>/dev/null
            break
        fi
        sleep 0.1
    done
    rm -f "$SHIM_DIR/$1.pid"
}

daemon_reload() {
    daemon_pid "$1" || { daemon_start "$1"; return; }
    case "$1" in
    haproxy)
        /usr/sbin/haproxy -c -q -f /etc/haproxy/haproxy.cfg || return 1
        kill -USR2 "$pid"
        ;;
    keepalived) kill -HUP "$pid" ;;
    esac
}

daemon_unit() { # verb unit
    case "$1" in
    start) daemon_start "$2" || rc=1 ;;
    restart) { daemon_stop "$2" && daemon_start "$2"; } || rc=1 ;;
    reload | reload-or-restart | try-reload-or-restart) daemon_reload "$2" || rc=1 ;;
    try-restart) if daemon_pid "$2"; then { daemon_stop "$2" && daemon_start "$2"; } || rc=1; fi ;;
    stop) daemon_stop "$2" || rc=1 ;;
    enable | disable) ;;
    is-enabled) echo enabled ;;
    is-active)
        if daemon_pid "$2"; then echo active; else echo inactive; rc=3; fi
        ;;
    status)
        if daemon_pid "$2"; then state="active (running)"; else state="inactive (dead)"; fi
        printf '%s\n' "* $2.service - $2 (lccn test host)" \
            "   Loaded: loaded (shim; enabled)" "   Active: $state"
        [ -n "$pid" ] && echo " Main PID: $pid ($2)"
        daemon_pid "$2" || rc=3
        ;;
    *)
        echo "systemctl (lccn test host): unsupported verb '$1'" >&2
        rc=1
        ;;
    esac
}

verb=""
units=""
for arg in "$@"; do
    case "$arg" in
    -*) ;; # --now, --quiet, --no-pager ...
    *) if [ -z "$verb" ]; then verb="$arg"; else units="$units ${arg%.service}"; fi ;;
    esac
done

case "$verb" in
daemon-reload | reset-failed) exit 0 ;;
is-system-running)
    echo running
    exit 0
    ;;
esac

rc=0
for unit in $units; do
    case "$unit" in
    haproxy | keepalived)
        daemon_unit "$verb" "$unit"
        continue
        ;;
    esac
    if [ "$unit" != kubelet ]; then
        case "$verb" in
        enable | disable) ;;
        status) printf '%s\n' "Unit $unit.service could not be found." "   Loaded: not-found" ;;
        is-active) echo inactive ;;
        is-enabled) echo not-found ;;
        *) echo "Failed to $verb $unit.service: Unit $unit.service not found." >&2 ;;
        esac
        case "$verb" in enable | disable) ;; status) rc=4 ;; *) rc=5 ;; esac
        continue
    fi
    case "$verb" in
    start) start || rc=1 ;;
    restart) { stop HUP && start; } || rc=1 ;;
    stop) stop || rc=1 ;;
    enable | disable) ;;
    is-enabled) echo enabled ;;
    is-active)
        if running; then echo active; else echo inactive; rc=3; fi
        ;;
    status)
        if running; then state="active (running)"; else state="inactive (dead)"; fi
        printf '%s\n' "* kubelet.service - kubelet stand-in (lccn test host)" \
            "   Loaded: loaded (standin; enabled)" "   Active: $state"
        [ -n "$pid" ] && echo " Main PID: $pid (kubelet)"
        running || rc=3
        ;;
    *)
        echo "systemctl (lccn test host): unsupported verb '$verb'" >&2
        rc=1
        ;;
    esac
done
exit "$rc"

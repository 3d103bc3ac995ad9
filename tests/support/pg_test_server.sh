#!/bin/bash
# A throwaway PostgreSQL 15 for tests (works as root: initdb/pg_ctl run as `postgres`).
#
#   pg_test_server.sh start DIR PORT   initdb DIR/data (trust, no fsync), start on
#                                      127.0.0.1:PORT with the socket in DIR, create the
#                                      database sluice_test and the role sluice_pw
#                                      (password 'sluice-test-secret', scram over TCP)
#   pg_test_server.sh stop DIR         stop it (fast) and remove DIR
#   pg_test_server.sh restart DIR      stop and start again, same data and port
#   pg_test_server.sh halt DIR         stop it, keep DIR (then `resume DIR`)
#   pg_test_server.sh resume DIR       start a halted server again
#
# Fails loudly (non-zero, the reason on stderr) if anything cannot be done.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
die() { echo "pg_test_server: $*" >&2; exit 1; }
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: $0 start DIR PORT | stop DIR | restart DIR | halt DIR | resume DIR"
[ -x "$PGBIN/initdb" ] || die "$PGBIN/initdb not found: apt-get install -y postgresql-15"

pg_start() {
  local port
  port=$(cat "$dir/port")
  as_pg "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
    start >/dev/null || { cat "$dir/server.log" >&2 || true; die "pg_ctl start failed (log above)"; }
}

pg_stop() {
  # A server that died without cleaning up (a killed test run, a reboot) leaves a stale pid
  # file: there is nothing to stop then.
  if [ -f "$dir/data/postmaster.pid" ] &&
    ! kill -0 "$(head -1 "$dir/data/postmaster.pid")" 2>/dev/null; then
    rm -f "$dir/data/postmaster.pid"
  fi
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null ||
      die "pg_ctl stop failed for $dir/data"
  fi
}

case "$cmd" in
  start)
    port=${3:-}
    [ -n "$port" ] || die "start needs a PORT"
    if [ -f "$dir/data/postmaster.pid" ]; then pg_stop; fi
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "$port" >"$dir/port"
    if [ "$(id -u)" = 0 ]; then chown -R postgres:postgres "$dir"; fi
    as_pg "$PGBIN/initdb" -A trust --no-sync -U postgres -D "$dir/data" >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; die "initdb failed (log above)"; }
    # The credential tests' role authenticates with a password over TCP; everyone else: trust.
    hba="$dir/data/pg_hba.conf"
    { echo "host all sluice_pw 127.0.0.1/32 scram-sha-256"; cat "$hba"; } >"$hba.new"
    mv "$hba.new" "$hba"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$hba"; fi
    pg_start
    psql="$PGBIN/psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $port -U postgres"
    $psql -d postgres -c "CREATE DATABASE sluice_test" ||
      die "cannot create database sluice_test"
    $psql -d postgres -c "CREATE ROLE sluice_pw LOGIN SUPERUSER PASSWORD 'sluice-test-secret'" ||
      die "cannot create role sluice_pw"
    echo "PostgreSQL 15 on 127.0.0.1:$port (data $dir/data)"
    ;;
  stop)
    pg_stop
    rm -rf "$dir"
    ;;
  restart)
    pg_stop
    pg_start
    ;;
  halt)
    pg_stop
    ;;
  resume)
    pg_start
    ;;
  *)
    die "unknown command '$cmd'"
    ;;
esac

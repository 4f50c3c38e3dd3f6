#!/usr/bin/env bash
# reap-job-leftovers.sh: the reap that sandkeeper's CI hooks share
# (contrib/github-actions, contrib/gitlab-runner, contrib/buildkite). Each
# CI's hook works out its directories from the job's environment and calls:
#
#   bash reap-job-leftovers.sh LABEL [--temp DIR]... [--temp-older-than DURATION]
#                                    [--work DIR]... [--work-older-than DURATION|off]
#
# --temp DIR   a temp area: every entry in it is some job's scratch. Reaped:
#              orphaned sandboxes, and unmanaged entries whose name does not
#              start with `_` (`_*` is the runner's own: RUNNER_TEMP's
#              `_runner_file_commands`, `_github_home`, `_github_workflow`).
#              With --temp-older-than, only those whose newest change inside
#              is older than that (for an area that live jobs share).
# --work DIR   a directory of workspaces (checkouts kept between jobs): one
#              whose name does not start with `_` goes once nothing in it
#              changed for --work-older-than (default 7d; `off`: never).
#
# Each DIR is reaped by `sandkeeper reap --match '[!_]*' DIR` (with an age,
# orphaned sandboxes first by a reap of their own: they are provably dead
# and go at once, where --older-than would hold them back too), so whatever
# sandkeeper keeps stays: anything live (a held lease), in use (a process's
# open file, working directory, mapping, a mount), unknown, or younger than
# the grace (60 s). Nothing outside DIR is looked at. Run as a
# normal user (the runner's), it reaps only that user's entries (--owner)
# and vouches for the processes it cannot inspect (--assume-unseen-free:
# its own processes are still checked, and its regular files are asked of
# the kernel; see docs/integrations.md).
#
# Environment (the runner's or agent's own, never required):
#   SANDKEEPER               the sandkeeper command (default: sandkeeper on PATH)
#   SANDKEEPER_HOOK_DRY_RUN  1: decide and log, remove nothing
#   SANDKEEPER_HOOK_TIMEOUT  give up on one reap after this long (default 10m;
#                            timeout(1) syntax)
#
# It never fails a job: it exits 0 whatever happens (sandkeeper missing, a
# bad directory, a reap that could not remove everything), and says so on
# stderr, one line per root, prefixed with `sandkeeper-hook[LABEL]:`.
set -u
# GitHub runs hooks with `bash -e`: nothing here may end the job early.
set +e

sk_label=${1:-hook}
shift 2>/dev/null
# A label is printed: keep it to safe characters.
sk_label=$(printf '%s' "$sk_label" | tr -c 'A-Za-z0-9._-' '_')

sk_log() {
    printf 'sandkeeper-hook[%s]: %s\n' "$sk_label" "$*" >&2
}

# A path for the log: control characters (a newline would fake a line of
# the log, or a workflow command) shown as `?`.
sk_show() {
    printf '%s' "$1" | tr '[:cntrl:]' '?'
}

sk_temps=()
sk_works=()
sk_temp_age=
sk_work_age=7d
while [ "$#" -gt 0 ]; do
    case $1 in
    --temp | --work | --temp-older-than | --work-older-than)
        if [ "$#" -lt 2 ]; then
            sk_log "$1 needs a value; nothing reaped"
            exit 0
        fi
        case $1 in
        --temp) sk_temps+=("$2") ;;
        --work) sk_works+=("$2") ;;
        --temp-older-than) sk_temp_age=$2 ;;
        --work-older-than) sk_work_age=$2 ;;
        esac
        shift 2
        ;;
    *)
        sk_log "unknown argument $(sk_show "$1"); nothing reaped"
        exit 0
        ;;
    esac
done

sk_cmd=${SANDKEEPER:-sandkeeper}
if ! command -v -- "$sk_cmd" >/dev/null 2>&1; then
    sk_log "$(sk_show "$sk_cmd") not found (PATH=$(sk_show "${PATH:-}")); nothing reaped, the job goes on"
    exit 0
fi

# Flags for every reap.
sk_flags=()
if [ "${SANDKEEPER_HOOK_DRY_RUN:-}" = 1 ]; then
    sk_flags+=(--dry-run)
fi
sk_uid=$(id -u 2>/dev/null)
if [ -z "$sk_uid" ]; then
    sk_log "cannot tell which user this is (id -u failed); nothing reaped"
    exit 0
fi
if [ "$sk_uid" != 0 ]; then
    # A normal user cannot inspect root's or other users' processes: without
    # vouching for them every entry stays `unknown`. Only this user's own
    # entries are candidates, its own processes are inspected, and its
    # regular files are asked of the kernel (a write lease).
    sk_flags+=(--owner "$sk_uid" --assume-unseen-free)
fi

sk_timeout=()
if command -v timeout >/dev/null 2>&1; then
    sk_timeout=(timeout --kill-after=10s "${SANDKEEPER_HOOK_TIMEOUT:-10m}")
fi

# Whether $1 may be a root: absolute, not `/`, no `.` or `..` component, an
# existing directory that is not a symlink (sandkeeper checks again, through
# descriptors).
sk_usable() {
    case $1 in
    /*) ;;
    *) return 1 ;;
    esac
    case /$1/ in
    */./* | */../*) return 1 ;;
    esac
    [ -n "${1//\//}" ] && [ -d "$1" ] && [ ! -L "$1" ]
}

# sk_run KIND DIR ARGS...: one `sandkeeper reap ARGS -- DIR`, logged.
sk_run() {
    local kind=$1 dir=$2 status
    shift 2
    sk_log "$kind area $(sk_show "$dir"): sandkeeper $*"
    ${sk_timeout[@]+"${sk_timeout[@]}"} "$sk_cmd" "$@" -- "$dir" </dev/null
    status=$?
    case $status in
    0) ;;
    1) sk_log "$kind area $(sk_show "$dir"): some entries could not be removed (exit status 1, see above); the job goes on" ;;
    124 | 137) sk_log "$kind area $(sk_show "$dir"): stopped after ${SANDKEEPER_HOOK_TIMEOUT:-10m} (exit status $status); the next run goes on" ;;
    *) sk_log "$kind area $(sk_show "$dir"): sandkeeper failed (exit status $status, see above); the job goes on" ;;
    esac
}

# sk_reap KIND DIR AGE: reap DIR. Orphaned sandboxes are provably dead and
# go at once; with an AGE, the unmanaged entries of the rule only once older
# (on the command line --older-than would hold back the orphans too, so
# they get a reap of their own first).
sk_reap() {
    local kind=$1 dir=$2 age=$3
    if ! sk_usable "$dir"; then
        sk_log "$kind area $(sk_show "$dir"): not an absolute path to a directory (or a symlink); skipped"
        return 0
    fi
    if [ -n "$age" ]; then
        sk_run "$kind" "$dir" reap ${sk_flags[@]+"${sk_flags[@]}"}
        sk_run "$kind" "$dir" reap ${sk_flags[@]+"${sk_flags[@]}"} --match '[!_]*' --older-than "$age"
    else
        sk_run "$kind" "$dir" reap ${sk_flags[@]+"${sk_flags[@]}"} --match '[!_]*'
    fi
    return 0
}

for sk_dir in ${sk_temps[@]+"${sk_temps[@]}"}; do
    sk_reap temp "$sk_dir" "$sk_temp_age"
done
if [ "$sk_work_age" = off ]; then
    [ "${#sk_works[@]}" -gt 0 ] && sk_log "work areas: not reaped (--work-older-than off)"
else
    for sk_dir in ${sk_works[@]+"${sk_works[@]}"}; do
        sk_reap work "$sk_dir" "$sk_work_age"
    done
fi
exit 0

#!/usr/bin/env bash
# sandkeeper's job-completed hook for a GitHub Actions self-hosted runner:
# after each job, reap what this job and earlier killed or cancelled jobs
# left in the runner's temp area and stale workspaces in its work area,
# never anything live or in use. It never fails the job.
#
# Install (docs/integrations.md), once per host, from a checkout:
#   sudo install -d /usr/local/lib/sandkeeper
#   sudo cp -R contrib/ci-hooks contrib/github-actions /usr/local/lib/sandkeeper/
# then in each runner's `.env` file (in its install directory, beside
# run.sh), and restart the runner (`sudo ./svc.sh stop && sudo ./svc.sh start`):
#   ACTIONS_RUNNER_HOOK_JOB_STARTED=/usr/local/lib/sandkeeper/github-actions/job-started.sh
#   ACTIONS_RUNNER_HOOK_JOB_COMPLETED=/usr/local/lib/sandkeeper/github-actions/job-completed.sh
#
# What it reaps, as the runner's user, through sandkeeper's in-use checks:
# - RUNNER_TEMP (<work>/_temp): orphaned sandboxes and every entry not named
#   `_*` (the runner's own), once nothing uses it and past the grace (60 s).
#   This runner runs no other job now, and other runners have temp areas of
#   their own.
# - the work directory <work> (the parent of RUNNER_WORKSPACE): a workspace
#   <work>/<repo> that no process uses and in which nothing changed for
#   SANDKEEPER_HOOK_WORK_AGE (default 7d; `off`: never). `_tool`, `_actions`,
#   `_PipelineMapping`, `_temp` and every other `_*` are never touched, nor
#   is the runner's install directory.
# Settings (the runner's `.env`): SANDKEEPER_HOOK_WORK_AGE, SANDKEEPER (the
# command, default `sandkeeper` on PATH), SANDKEEPER_HOOK_DRY_RUN=1,
# SANDKEEPER_HOOK_TIMEOUT (default 10m).
set -u
set +e

sk_phase=${1:-job-completed}
sk_here=$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")
sk_reaper=$sk_here/../ci-hooks/reap-job-leftovers.sh
if [ ! -f "$sk_reaper" ]; then
    echo "sandkeeper-hook[github-$sk_phase]: $sk_reaper is missing (install contrib/ci-hooks beside contrib/github-actions); nothing reaped" >&2
    exit 0
fi

# RUNNER_TEMP is always <work>/_temp and RUNNER_WORKSPACE <work>/<repo>, and
# the runner made <work>/_PipelineMapping: anything else is not a runner's
# layout (variables a job could have changed, say), and is not reaped.
sk_args=()
sk_temp=${RUNNER_TEMP:-}
sk_workspace=${RUNNER_WORKSPACE:-}
while [ "${sk_temp%/}" != "$sk_temp" ]; do sk_temp=${sk_temp%/}; done
while [ "${sk_workspace%/}" != "$sk_workspace" ]; do sk_workspace=${sk_workspace%/}; done
sk_work=${sk_temp%/_temp}
case $sk_temp in
/?*/_temp)
    if [ -d "$sk_work/_PipelineMapping" ] && [ ! -L "$sk_work/_PipelineMapping" ]; then
        sk_args+=(--temp "$sk_temp")
        if [ "${sk_workspace%/*}" = "$sk_work" ] && [ "$sk_workspace" != "$sk_work" ]; then
            sk_args+=(--work "$sk_work" --work-older-than "${SANDKEEPER_HOOK_WORK_AGE:-7d}")
        else
            echo "sandkeeper-hook[github-$sk_phase]: RUNNER_WORKSPACE is not a directory of the work directory; the work area is not reaped" >&2
        fi
    else
        echo "sandkeeper-hook[github-$sk_phase]: no _PipelineMapping beside RUNNER_TEMP: not a runner's work directory; nothing reaped" >&2
    fi
    ;;
*) echo "sandkeeper-hook[github-$sk_phase]: RUNNER_TEMP is not <work>/_temp; nothing reaped" >&2 ;;
esac

# What sandkeeper prints is not a workflow command, whatever names it shows.
sk_token=sandkeeper-$$-${RANDOM}${RANDOM}
echo "::stop-commands::$sk_token"
bash "$sk_reaper" "github-$sk_phase" ${sk_args[@]+"${sk_args[@]}"}
echo "::$sk_token::"
exit 0

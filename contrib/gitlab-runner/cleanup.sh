#!/usr/bin/env bash
# sandkeeper's cleanup_exec for GitLab Runner's custom executor (or a line
# to call from your driver's own cleanup script: `bash .../cleanup.sh ARGS ||
# true`). GitLab runs cleanup_exec after every job, failed and cancelled
# ones too; a job whose runner died is caught by the next job's cleanup, or
# by `sandkeeper watch`. It never fails the job.
#
# The directories come from cleanup_args in config.toml, the administrator's
# word, never from the job's variables (CUSTOM_ENV_*: a job in a VM or a
# container must not choose what the host deletes):
#   cleanup_exec = "/usr/local/lib/sandkeeper/gitlab-runner/cleanup.sh"
#   cleanup_args = ["--temp", "/var/lib/gitlab-runner/runs", "--temp-older-than", "0"]
# --temp DIR: a directory in which the driver makes each job's scratch or
# run directory (a VM's disk, say): every entry not named `_*` that nothing
# uses any more goes (--temp-older-than DURATION: only older ones, for a
# directory that concurrent jobs share and whose entries are not leased).
# --work DIR: a directory of checkouts kept between jobs: one that nothing
# uses and in which nothing changed for --work-older-than (default 7d) goes.
# Read contrib/ci-hooks/reap-job-leftovers.sh for the details.
set -u
set +e

sk_reaper=$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/../ci-hooks/reap-job-leftovers.sh
# The job id, for the log only, and only its digits.
sk_job=${CUSTOM_ENV_CI_JOB_ID:-}
sk_job=${sk_job//[!0-9]/}
if [ ! -f "$sk_reaper" ]; then
    echo "sandkeeper-hook[gitlab-cleanup-$sk_job]: $sk_reaper is missing (install contrib/ci-hooks beside contrib/gitlab-runner); nothing reaped" >&2
    exit 0
fi
bash "$sk_reaper" "gitlab-cleanup-$sk_job" "$@"
exit 0

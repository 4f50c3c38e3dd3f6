#!/usr/bin/env bash
# sandkeeper's hook for GitLab Runner's shell executor, run from
# pre_build_script (`pre-build`) and post_build_script (`post-build`) of a
# [[runners]] section (contrib/gitlab-runner/config.toml): before a job's
# script it reaps what earlier jobs left, killed and cancelled ones too
# (post_build_script does not run after a failed script); after it, what
# this job left. It never fails the job.
#
# Install, from a checkout (docs/integrations.md):
#   sudo install -d /usr/local/lib/sandkeeper
#   sudo cp -R contrib/ci-hooks contrib/gitlab-runner /usr/local/lib/sandkeeper/
# then merge contrib/gitlab-runner/config.toml into /etc/gitlab-runner/config.toml.
#
# What it reaps, as the runner's user, through sandkeeper's in-use checks:
# - SANDKEEPER_HOOK_TEMP, when set (the config sets it to the jobs' TMPDIR):
#   orphaned sandboxes, and every entry not named `_*` whose newest change
#   inside is older than SANDKEEPER_HOOK_TEMP_AGE (default 6h: concurrent jobs
#   share it; `0` where one job at a time uses it).
# - the directory holding CI_PROJECT_DIR (<builds>/<token>/<n>/<group>),
#   when it is inside CI_BUILDS_DIR: a project directory, or its `.tmp`,
#   that no process uses and in which nothing changed for
#   SANDKEEPER_HOOK_WORK_AGE (default 7d; `off`: never). The current job's
#   is in use and new. cache_dir, the runner's own files and anything
#   outside those two directories are never touched.
# Settings (`environment` of the [[runners]] section): SANDKEEPER_HOOK_TEMP,
# SANDKEEPER_HOOK_TEMP_AGE, SANDKEEPER_HOOK_WORK_AGE, SANDKEEPER (the
# command), SANDKEEPER_HOOK_DRY_RUN=1, SANDKEEPER_HOOK_TIMEOUT (default 10m).
set -u
set +e

case ${1:-} in
pre-build | post-build) sk_phase=$1 ;;
*) sk_phase=build ;;
esac
sk_reaper=$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/../ci-hooks/reap-job-leftovers.sh
if [ ! -f "$sk_reaper" ]; then
    echo "sandkeeper-hook[gitlab-$sk_phase]: $sk_reaper is missing (install contrib/ci-hooks beside contrib/gitlab-runner); nothing reaped" >&2
    exit 0
fi

sk_args=()
if [ -n "${SANDKEEPER_HOOK_TEMP:-}" ]; then
    sk_args+=(--temp "$SANDKEEPER_HOOK_TEMP" --temp-older-than "${SANDKEEPER_HOOK_TEMP_AGE:-6h}")
fi
sk_builds=${CI_BUILDS_DIR:-}
sk_project=${CI_PROJECT_DIR:-}
while [ "${sk_builds%/}" != "$sk_builds" ]; do sk_builds=${sk_builds%/}; done
while [ "${sk_project%/}" != "$sk_project" ]; do sk_project=${sk_project%/}; done
sk_parent=${sk_project%/*}
sk_below=${sk_parent#"$sk_builds"/}
if [ -n "$sk_builds" ] && [ -n "$sk_project" ] && [ "$sk_below" != "$sk_parent" ] && [ -n "$sk_below" ]; then
    sk_args+=(--work "$sk_parent" --work-older-than "${SANDKEEPER_HOOK_WORK_AGE:-7d}")
else
    echo "sandkeeper-hook[gitlab-$sk_phase]: CI_PROJECT_DIR is not two levels or more inside CI_BUILDS_DIR; the builds directory is not reaped" >&2
fi

bash "$sk_reaper" "gitlab-$sk_phase" ${sk_args[@]+"${sk_args[@]}"}
exit 0

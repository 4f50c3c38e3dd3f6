#!/usr/bin/env bash
# sandkeeper's job-started hook for a GitHub Actions self-hosted runner: the
# reap of job-completed.sh (beside this file; read its header), before the
# job starts, so that what a cancelled job or a dead runner left is gone
# before the next job needs the space. It never fails the job (a job-started
# hook that exits non-zero would).
#
# In the runner's `.env` file:
#   ACTIONS_RUNNER_HOOK_JOB_STARTED=/usr/local/lib/sandkeeper/github-actions/job-started.sh
set -u
set +e
bash "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/job-completed.sh" job-started
exit 0

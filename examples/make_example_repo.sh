#!/usr/bin/env bash
# Build a small git repository to review with `kernelize review`: the commit on `main` holds
# examples/tiny-model/base/, and the branch `add-rmsnorm` adds examples/tiny-model/head/ on top
# (an RMSNorm module), as a pull request would.
#
#   examples/make_example_repo.sh [DIR]      (default: kernelize-example)
#   kernelize review main..add-rmsnorm --repo DIR
#
# DIR must not exist, be empty, or be a repository this script built earlier (it is rebuilt).
# The commits' author and dates are fixed, so their hashes are the same on every machine.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${1:-kernelize-example}
stamp=.git/kernelize-example

if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
    if [ ! -f "$dir/$stamp" ]; then
        echo "make_example_repo.sh: $dir exists and is not an example repository built here; give another folder" >&2
        exit 2
    fi
    rm -rf "$dir"
fi
mkdir -p "$dir"

git_() {
    GIT_AUTHOR_DATE="2025-01-01T12:00:00Z" GIT_COMMITTER_DATE="2025-01-01T12:00:00Z" \
        git -C "$dir" -c user.name="Kernelize example" -c user.email="example@kernelize.invalid" \
        -c commit.gpgsign=false -c core.hooksPath=/dev/null "$@"
}

git_ init -q -b main
touch "$dir/$stamp"
cp -R "$here/tiny-model/base/." "$dir/"
git_ add -A
git_ commit -q -m "A feed-forward block"
git_ checkout -q -b add-rmsnorm
cp -R "$here/tiny-model/head/." "$dir/"
git_ add -A
git_ commit -q -m "Add an RMSNorm module"
echo "$dir: main..add-rmsnorm adds $(git_ diff --numstat main add-rmsnorm | awk '{n += $1} END {print n}') line(s)"

#!/bin/bash
# Lines of sklearn_fed/*.py at a revision, split by the commit that last wrote each line
# (git blame): "new features" are the lines of the commits in tools/new_feature_commits.txt
# (issues 27-30, written after 5867048); "same features" are all the others, the features
# that existed at 5867048, where the package had 23,691 lines.
#
#   bash tools/line_count.sh [REV]       # default HEAD
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
new=$(grep -v '^#' tools/new_feature_commits.txt | while read -r c; do git rev-parse "$c"; done)
for f in $(git ls-tree -r --name-only "$rev" sklearn_fed | grep '\.py$'); do
  git blame --line-porcelain "$rev" -- "$f" | grep '^[0-9a-f]\{40\} ' | cut -c1-40
done | sort | uniq -c | awk -v new="$new" '
  BEGIN { n = split(new, list, "\n"); for (i = 1; i <= n; i++) is_new[list[i]] = 1 }
  { if ($2 in is_new) added += $1; else same += $1 }
  END { printf "total %d  same features %d (%+d against 23,691 at 5867048)  new features %d\n",
        added + same, same, same - 23691, added }'

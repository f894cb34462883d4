#!/bin/sh
# Makes a git repository holding the example's training program (and the
# InfraRSI harness it imports), for a session to tune.
# Usage: make_repo.sh DIR
set -eu
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
dest=$1
[ ! -e "$dest" ] || { echo "$dest already exists" >&2; exit 1; }
mkdir -p "$dest"
cp "$here/train.py" "$here/model.py" "$here/data.py" "$dest/"
cp "$here/../../../client/harness/infrarsi_harness.py" "$dest/"
cd "$dest"
git init -q
git add train.py model.py data.py infrarsi_harness.py
git -c user.name=InfraRSI -c user.email=infrarsi@localhost commit -q -m "tiny GPT training job"
echo "made $dest at $(git rev-parse HEAD)"

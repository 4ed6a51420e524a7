#!/usr/bin/env bash
# hack/version.sh [DESCRIBE]: the one version `make build`, `make image` and
# `make release` stamp on binaries, image tag and chart (version and
# appVersion), from `git describe --tags --always --dirty` or DESCRIBE. It is
# always a semantic version, which Helm requires of a chart and an image tag
# can hold:
#
#   v0.2.0                  -> 0.2.0              (a release tag: the v dropped)
#   v0.2.0-rc.1             -> 0.2.0-rc.1
#   v0.2.0-3-gabc1234-dirty -> 0.2.0-3-gabc1234-dirty   (3 commits after v0.2.0)
#   abc1234[-dirty]         -> 0.0.0-gabc1234[-dirty]   (no tag before the commit)
#   (no git)                -> 0.0.0-dev
#
# The "g" before a bare hash keeps an all-digit hash with a leading zero a
# valid prerelease identifier, as git describe does. A build after a tag is a
# prerelease of that tag, so it sorts before it: tag a release to publish it.
set -euo pipefail
describe=${1:-$(git -C "$(dirname "$0")/.." describe --tags --always --dirty 2>/dev/null || true)}
version=${describe#v}
num='(0|[1-9][0-9]*)'
if [ -z "$describe" ]; then
  echo 0.0.0-dev
elif [[ $version =~ ^${num}\.${num}\.${num}(-.*)?$ ]]; then
  echo "$version"
elif [[ $describe =~ ^[0-9a-f]{4,40}(-dirty)?$ ]]; then
  echo "0.0.0-g$describe"
else
  echo "hack/version.sh: \"$describe\" is neither a vMAJOR.MINOR.PATCH tag's description nor a commit hash; tag releases as v0.2.0" >&2
  exit 1
fi

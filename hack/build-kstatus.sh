#!/usr/bin/env bash
# Builds hack/tools/kstatus (status.Compute of the pinned sigs.k8s.io/cli-utils over objects read as
# JSON) into the cache, once per version of the library and of the program's source.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=$BELAY_CLIUTILS_VERSION
requirements=("sigs.k8s.io/cli-utils@$version")
bin_dir="$BELAY_CACHE/bin/kstatus-$version-$(own_tool_key kstatus "${requirements[@]}")"

begin_build "kstatus-$version" "$bin_dir" kstatus
build_own_tool kstatus "$bin_dir" "${requirements[@]}"
finish_build "kstatus-$version" "$bin_dir"

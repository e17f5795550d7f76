#!/usr/bin/env bash
# Builds hack/tools/argocd-health (Argo CD health scripts run under the pinned gopher-lua, checked
# against cases in Argo CD's layout) into the cache, once per version of the libraries and of the
# program's source.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=$BELAY_GOPHERLUA_VERSION
requirements=("github.com/yuin/gopher-lua@$version" "sigs.k8s.io/yaml@$BELAY_SIGSYAML_VERSION")
bin_dir="$BELAY_CACHE/bin/argocd-health-$version-$(own_tool_key argocd-health "${requirements[@]}")"

begin_build "argocd-health-$version" "$bin_dir" argocd-health
build_own_tool argocd-health "$bin_dir" "${requirements[@]}"
finish_build "argocd-health-$version" "$bin_dir"

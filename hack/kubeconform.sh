#!/usr/bin/env bash
# `make lint`'s check of the manifests: `helm lint --strict` of the chart, then kubeconform, strict,
# over the chart as helm renders it (every optional template and knob on,
# charts/belay/ci/every-knob-values.yaml, its CRDs included; and with the evaluation etcd on,
# charts/belay/ci/evaluation-etcd-values.yaml) and every
# example manifest, against JSON schemas made from the generated CRDs and from the OpenAPI of the
# pinned Kubernetes version (tests/json_schemas.py); nothing is downloaded but, on a fresh machine,
# the Go modules the builds need. helm and kubeconform are built first when not cached.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
source "$here/lib.sh"
python=${PYTHON:-$root/.venv/bin/python}

bash "$here/build-helm.sh"
bash "$here/build-kubeconform.sh"
helm="$BELAY_CACHE/bin/helm-$BELAY_HELM_VERSION/helm"
kubeconform="$BELAY_CACHE/bin/kubeconform-$BELAY_KUBECONFORM_VERSION/kubeconform"

work=$(mktemp -d "${TMPDIR:-/tmp}/belay-kubeconform.XXXXXX")
trap 'rm -rf "$work"' EXIT

every_knob="$root/charts/belay/ci/every-knob-values.yaml"
evaluation_etcd="$root/charts/belay/ci/evaluation-etcd-values.yaml"
"$helm" lint --strict "$root/charts/belay" -f "$every_knob"
"$helm" lint --strict "$root/charts/belay" -f "$evaluation_etcd"
"$helm" template belay "$root/charts/belay" --namespace belay-system --include-crds -f "$every_knob" \
  >"$work/chart.yaml"
"$helm" template belay "$root/charts/belay" --namespace belay-system -f "$evaluation_etcd" \
  >"$work/chart-etcd.yaml"

kube_module=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$BELAY_KUBE_VERSION" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
mapfile -t candidates < <(find "$root/examples" -name '*.yaml' | sort)
mapfile -t manifests < <(cd "$root" && "$python" -m tests.json_schemas \
  --swagger "$kube_module/api/openapi-spec/swagger.json" --crds crds \
  "$work/schemas" "$work/chart.yaml" "$work/chart-etcd.yaml" "${candidates[@]}")
((${#manifests[@]} > 1)) || { log "no example manifest found under examples/"; exit 1; }

# The chart's optional ServiceMonitor is the Prometheus operator's kind: no schema of it is here.
"$kubeconform" -strict -summary -skip monitoring.coreos.com/v1/ServiceMonitor \
  -schema-location "$work/schemas/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}{{ .StrictSuffix }}.json" \
  "${manifests[@]}"

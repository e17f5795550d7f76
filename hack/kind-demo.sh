#!/usr/bin/env bash
# `make kind-demo`: the example session on a kind cluster, the way tests/node runs it on the test
# node (docs/quickstart-kind.md): build the Belay image and load it into the cluster (never pulled),
# run the stores and the ticket service in belay-system, install the chart with them, and apply
# examples/parser-fix/cluster-session.yaml in a namespace that enforces the "restricted" level.
#
# Needs docker, kind (v0.24 or newer: it enforces NetworkPolicies), kubectl and helm, and a registry
# for the public images (kindest/node, python, etcd, versitygw). Safe to run again: every step
# applies or upgrades.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
source "$here/lib.sh"

cluster=${KIND_CLUSTER:-belay}
image=${BELAY_IMAGE:-belay-harness:dev}
system=belay-system
sessions=belay-sessions

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not on PATH; install it (see docs/quickstart-kind.md)" >&2; exit 1; }
done
kube=(kubectl --context "kind-$cluster")

if ! kind get clusters | grep -qx "$cluster"; then
  log "creating the kind cluster $cluster"
  kind create cluster --name "$cluster" --config "$here/kind/cluster.yaml"
fi

log "building $image and loading it into the cluster"
DOCKER_BUILDKIT=1 docker build -f "$repo/harness-image/Dockerfile" -t "$image" "$repo"
kind load docker-image "$image" --name "$cluster"

log "namespaces, enforcing the restricted Pod Security level"
for ns in "$system" "$sessions"; do
  "${kube[@]}" create namespace "$ns" --dry-run=client -o yaml | "${kube[@]}" apply -f -
  "${kube[@]}" label namespace "$ns" pod-security.kubernetes.io/enforce=restricted --overwrite
done

# The stores' credentials and endpoints, and the ticket service's address and credential: loaded with envFrom by
# the operator and every harness. Made once; a later run keeps them (and the data they protect).
if ! "${kube[@]}" get secret belay-stores -n "$system" >/dev/null 2>&1; then
  key=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
  secret=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
  for ns in "$system" "$sessions"; do
    "${kube[@]}" create secret generic belay-stores -n "$ns" \
      --from-literal=AWS_ACCESS_KEY_ID="belay-$key" --from-literal=AWS_SECRET_ACCESS_KEY="$secret" \
      --from-literal=AWS_ENDPOINT_URL="http://belay-s3.$system:7070" --from-literal=AWS_DEFAULT_REGION=us-east-1 \
      --from-literal=BELAY_TICKETS_URL="http://belay-tickets.$system:8090"
  done
fi
# The credential the ticket service takes from every request (added to a Secret made without it).
if [ -z "$("${kube[@]}" get secret belay-stores -n "$system" -o jsonpath='{.data.BELAY_TICKETS_TOKEN}')" ]; then
  token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  for ns in "$system" "$sessions"; do
    "${kube[@]}" patch secret belay-stores -n "$ns" --type merge -p "{\"stringData\":{\"BELAY_TICKETS_TOKEN\":\"$token\"}}"
  done
fi

log "etcd, the S3 server and the ticket service in $system"
ETCD_VERSION=$BELAY_ETCD_VERSION S3_VERSION=$BELAY_S3_VERSION IMAGE=$image \
  python3 -c 'import os, sys; sys.stdout.write(os.path.expandvars(sys.stdin.read()))' <"$here/kind/stores.yaml" \
  | "${kube[@]}" apply -f -
for deployment in belay-etcd belay-s3 belay-tickets; do
  "${kube[@]}" rollout status -n "$system" "deployment/$deployment" --timeout=300s
done

log "the artifact bucket"
"${kube[@]}" delete job belay-bucket -n "$system" --ignore-not-found >/dev/null
"${kube[@]}" apply -f - <<JOB
apiVersion: batch/v1
kind: Job
metadata: {name: belay-bucket, namespace: $system}
spec:
  backoffLimit: 10
  template:
    spec:
      restartPolicy: OnFailure
      securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: bucket
          image: $image
          imagePullPolicy: IfNotPresent
          envFrom: [{secretRef: {name: belay-stores}}]
          command: [python, -c, "import boto3, botocore; c = boto3.client('s3')\ntry: c.create_bucket(Bucket='belay-artifacts')\nexcept botocore.exceptions.ClientError as e:\n    if 'BucketAlready' not in str(e): raise"]
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
JOB
"${kube[@]}" wait --for=condition=complete -n "$system" job/belay-bucket --timeout=300s

log "the operator (charts/belay)"
store_egress='[{"namespaceLabels": {"kubernetes.io/metadata.name": "'$system'"}, "podLabels": {"app": "belay-etcd"}, "ports": [2379]},
               {"namespaceLabels": {"kubernetes.io/metadata.name": "'$system'"}, "podLabels": {"app": "belay-s3"}, "ports": [7070]}]'
model_egress='[{"namespaceLabels": {"kubernetes.io/metadata.name": "'$system'"}, "podLabels": {"app": "belay-tickets"}, "ports": [8090]}]'
helm upgrade --install belay "$repo/charts/belay" --kube-context "kind-$cluster" --namespace "$system" \
  --set image.repository="${image%:*}" --set image.tag="${image##*:}" --set image.pullPolicy=IfNotPresent \
  --set stores.events="etcd://belay-etcd.$system:2379/belay" --set stores.artifacts=s3://belay-artifacts \
  --set stores.existingSecret=belay-stores --set-json "watchNamespaces=[\"$sessions\"]" \
  --set-json "sessions.storeEgress=$store_egress" --set-json "sessions.modelEgress=$model_egress" \
  --wait --timeout 300s

log "the example session in $sessions"
"${kube[@]}" apply -n "$sessions" -f "$repo/examples/parser-fix/cluster-session.yaml"
"${kube[@]}" get pods -n "$sessions" -o wide
echo
echo "follow it:  kubectl --context kind-$cluster get agentsessions -n $sessions -w"
echo "briefing:   kubectl belay brief parser-fix -n $sessions   (kind made kind-$cluster the current context)"
echo "remove it:  kind delete cluster --name $cluster"
